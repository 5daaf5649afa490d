"""A Python requester of the MCP Tasks extension (2026-07-28), built on what the SDK (2.3) offers: a
``ClientExtension`` that advertises ``io.modelcontextprotocol/tasks`` (the SDK stamps it into every request's
``_meta`` client capabilities) and claims the ``resultType: "task"`` shape of ``tools/call``; ``tasks/get``
and ``tasks/cancel`` are typed ``Request`` models whose ``name_param`` puts the task id in ``Mcp-Name``.

``client.session.call_tool(..., allow_claimed=True)`` returns the :class:`CreatedTask` handle itself;
:func:`poll` follows it to a terminal status (bounded by the caller's cancel scope)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim

__all__ = [
    "EXTENSION_ID",
    "CreatedTask",
    "TaskIdParams",
    "TasksCancel",
    "TasksExtension",
    "TasksGet",
    "TasksUpdate",
    "UpdateParams",
    "cancel",
    "get",
    "poll",
    "update",
]

EXTENSION_ID = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class CreatedTask(types.Result):
    """``CreateTaskResult`` of the extension: the task fields inline, ``resultType: "task"``."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class TasksGet(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class TasksCancel(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class TasksUpdate(types.Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams
    name_param = "taskId"


class _Detailed(types.Result):
    model_config = types.Result.model_config | {"extra": "allow"}


async def get(client: Client, task_id: str) -> dict[str, Any]:
    """One ``tasks/get``: the ``DetailedTask`` as sent (camelCase keys)."""
    got = await client.session.send_request(TasksGet(params=TaskIdParams(task_id=task_id)), _Detailed)
    return got.model_dump(mode="json", by_alias=True, exclude_none=True)


async def cancel(client: Client, task_id: str) -> None:
    await client.session.send_request(TasksCancel(params=TaskIdParams(task_id=task_id)), _Detailed)


async def update(client: Client, task_id: str, responses: dict[str, Any]) -> None:
    """``tasks/update``: answers to the task's outstanding ``inputRequests``, by key."""
    params = UpdateParams(task_id=task_id, input_responses=responses)
    await client.session.send_request(TasksUpdate(params=params), _Detailed)


async def poll(client: Client, task_id: str, *, seen: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``tasks/get`` until the task is terminal (at the suggested interval, at most 0.25 s here)."""
    while True:
        detail = await get(client, task_id)
        if seen is not None:
            seen.append(detail)
        if detail["status"] in TERMINAL:
            return detail
        await anyio.sleep(min(0.25, (detail.get("pollIntervalMs") or 250) / 1000))


class TasksExtension(ClientExtension):
    """Advertises the extension and resolves a task answer transparently (``Client.call_tool``)."""

    identifier = EXTENSION_ID

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    @staticmethod
    async def _resolve(created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        while True:
            got = await ctx.session.send_request(
                TasksGet(params=TaskIdParams(task_id=created.task_id)), _Detailed
            )
            detail = got.model_dump(mode="json", by_alias=True, exclude_none=True)
            if detail["status"] == "completed":
                return types.CallToolResult.model_validate(detail["result"])
            if detail["status"] in TERMINAL:
                raise RuntimeError(f"task {created.task_id} ended {detail['status']}: {detail}")
            await anyio.sleep(0.25)
