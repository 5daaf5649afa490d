"""Relayed upstream tasks: an upstream's own MCP tasks, passed through (never tasks the gateway invents).

A caller that asks for a task on a relayed tool (2025-11-25: a ``task`` param; 2026-07-28: the extension
declared on the request) gets one only when that tool's upstream offers tasks **in the same era**
(``upstream.UpstreamTasks.era``); the upstream creates it, and its ``CreateTaskResult`` reaches the caller
untouched (the upstream's task id). Otherwise the call is an ordinary relayed call, exactly as without tasks.

The gateway remembers each relayed task id with its upstream, its creator (principal) and its era, in memory
(:class:`RelayedTaskMap`, at most :data:`MAP_CAP` ids, the oldest dropped first): the upstream owns the
task's lifetime, and a gateway restart forgets the map (those ids then read "Task not found" here; the
upstream may still hold them). ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/update`` for
a remembered id go to its upstream, answered untouched (on 2026-07-28 with the gateway's ``serverInfo``
stamp, as for its own tasks); another principal's id, or one asked in the other era, is "not found" like an
unknown one. ``tasks/list`` (2025-11-25) adds the caller's relayed tasks, each as its upstream's
``tasks/get`` answers it now (one that cannot be read is left out).

Each step leaves an ``mcp_task_*`` audit record like an own task's (``created``, ``polled``, ``cancelled``),
its facts naming the upstream. Upstream failures map as on relayed resources: the upstream's own JSON-RPC
error unchanged, a gateway-side one (``upstream_unavailable``, ``upstream_ambiguous``) as ``-32603`` whose
``data`` is the structured error.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from mcp import MCPError
from pydantic import BaseModel

from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from gateway._redact import Redactor
from gateway.audit.log import AuditLog
from gateway.mcptasks.records import Generation
from upstream import UpstreamError, UpstreamRejected, UpstreamTasks

__all__ = [
    "MAP_CAP",
    "RelayedCreate",
    "RelayedTask",
    "RelayedTaskMap",
    "RelayedTasks",
    "created_task_id",
]

MAP_CAP: Final = 10_000
"""Relayed task ids remembered at most (the oldest is forgotten first)."""

RelayedCreate = Callable[
    [Any, types.CallToolRequestParams, Generation, int | None], Awaitable[dict[str, Any] | BaseModel | None]
]
"""``create(ctx, params, generation, ttl_ms)``: the answer to a task-augmented call of a relayed tool whose
upstream offers tasks in ``generation`` (the upstream's answer as a dict, or the gateway's own answer when
the call never reached it: a refusal, an error result); None when it is not such a call (then it is
relayed as an ordinary call)."""


@dataclass(frozen=True)
class RelayedTask:
    task_id: str
    upstream: str
    upstream_index: int
    principal: str
    generation: Generation
    tool: str


def created_task_id(answer: Mapping[str, Any], generation: Generation) -> str | None:
    """The task id of an upstream's answer to a task-augmented call, when it created a task."""
    if generation == "v1":
        task = answer.get("task")
        task_id = task.get("taskId") if isinstance(task, Mapping) else None
    else:
        task_id = answer.get("taskId") if answer.get("resultType") == "task" else None
    return task_id if isinstance(task_id, str) else None


class RelayedTaskMap:
    """Relayed task id → where it lives and who made it; bounded, in memory only."""

    def __init__(self, cap: int = MAP_CAP) -> None:
        self._cap = cap
        self._tasks: OrderedDict[str, RelayedTask] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tasks)

    def remember(self, task: RelayedTask) -> None:
        self._tasks[task.task_id] = task
        self._tasks.move_to_end(task.task_id)
        while len(self._tasks) > self._cap:
            self._tasks.popitem(last=False)

    def find(self, task_id: str, principal: str, generation: Generation) -> RelayedTask | None:
        """The caller's relayed task of this era; None for any other (unknown, another principal's)."""
        task = self._tasks.get(task_id)
        if task is None or task.principal != principal or task.generation != generation:
            return None
        return task

    def owned_by(self, principal: str, generation: Generation) -> list[RelayedTask]:
        """Newest first."""
        return [
            t
            for t in reversed(self._tasks.values())
            if t.principal == principal and t.generation == generation
        ]


class RelayedTasks:
    """The map and each relayed task request, audited and with upstream failures mapped."""

    def __init__(
        self,
        upstream: Callable[[int], UpstreamTasks],
        audit: AuditLog,
        redactor: Redactor,
        *,
        cap: int = MAP_CAP,
    ) -> None:
        self.map = RelayedTaskMap(cap)
        self._upstream = upstream
        self._audit = audit
        self._redactor = redactor

    def _event(self, event: str, task: RelayedTask, status: Any) -> None:
        self._audit.mcp_task(
            event,
            task_id=task.task_id,
            principal=task.principal,
            tool=task.tool,
            status=status if isinstance(status, str) else None,
            generation=task.generation,
            facts={"upstream": task.upstream, "relayed": True},
        )

    def created(self, task: RelayedTask, answer: Mapping[str, Any]) -> None:
        self.map.remember(task)
        status = answer.get("task", {}).get("status") if task.generation == "v1" else answer.get("status")
        self._event("mcp_task_created", task, status)

    async def _ask(self, run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        try:
            return await run()
        except UpstreamRejected as exc:  # the upstream's JSON-RPC error reaches the client unchanged
            raise MCPError(exc.code, exc.message, exc.data) from exc
        except UpstreamError as exc:
            failure = translate(exc) or ToolFailure(ErrorCode.UPSTREAM_UNAVAILABLE, str(exc))
            data = self._redactor.any(failure.as_dict())
            raise MCPError(types.INTERNAL_ERROR, str(data["message"]), data) from None

    async def get(self, task: RelayedTask) -> dict[str, Any]:
        up = self._upstream(task.upstream_index)
        answer = await self._ask(lambda: up.get(task.task_id, task.generation))
        self._event("mcp_task_polled", task, answer.get("status"))
        return answer

    async def result(self, task: RelayedTask) -> dict[str, Any]:
        up = self._upstream(task.upstream_index)
        return await self._ask(lambda: up.result(task.task_id))

    async def cancel(self, task: RelayedTask) -> dict[str, Any]:
        up = self._upstream(task.upstream_index)
        answer = await self._ask(lambda: up.cancel(task.task_id, task.generation))
        self._event("mcp_task_cancelled", task, answer.get("status", "cancelled"))
        return answer

    async def update(self, task: RelayedTask, responses: Mapping[str, Any]) -> dict[str, Any]:
        up = self._upstream(task.upstream_index)
        return await self._ask(lambda: up.update(task.task_id, responses))

    async def listing(self, principal: str, room: int) -> list[dict[str, Any]]:
        """Up to ``room`` of the caller's 2025-11-25 relayed tasks, each as its upstream reads it now
        (one its upstream cannot answer for — gone, unreachable — is left out)."""
        out: list[dict[str, Any]] = []
        for task in self.map.owned_by(principal, "v1")[: max(0, room)]:
            try:
                out.append(await self.get(task))
            except MCPError:
                continue
        return out
