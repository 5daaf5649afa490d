"""The task methods and the ``tools/call`` interception, on the SDK's low-level ``Server``.

The SDK (2.3) defines the 2025-11-25 task types but dispatches none of their methods, and has no tasks
extension: :func:`install` registers ``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel`` and
``tasks/update`` with ``Server.add_request_handler`` and adds a ``Server.middleware`` for ``tools/call``.
The middleware is needed because the SDK validates a 2025-11-25 ``tools/call`` result as a
``CallToolResult``: a ``CreateTaskResult`` can only leave from a middleware that answers without calling
on (the SDK's documented short-circuit, which then owns its envelope, ``serverInfo`` stamp included).

Relayed upstream tools keep their own tasks (``gateway.mcptasks.relayed``): a task-augmented call of one
whose upstream offers tasks in the caller's era is answered by ``TaskHooks.relayed_create`` (the upstream's
``CreateTaskResult``), and the ``tasks/*`` methods route the ids it remembered to that upstream.

Errors as the spec gives them: an unknown id, an expired one and another principal's all get ``-32602``
("Task not found"); a 2026-07-28 request on ``tasks/*`` without the extension declared gets ``-32021``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from gateway.mcptasks.negotiate import EXTENSION_ID, declares_extension, may_run_as_task, wants_task
from gateway.mcptasks.records import Generation, McpTaskRecord
from gateway.mcptasks.relayed import RelayedCreate, RelayedTask, RelayedTasks
from gateway.mcptasks.runner import McpTasks
from gateway.mcptasks.store import McpTaskNotFound
from gateway.mcptasks.wire import (
    MISSING_CAPABILITY,
    ResultOf,
    created_v1,
    created_v2,
    detailed_v2,
    missing_capability_data,
    task_v1,
)

__all__ = ["Plan", "TaskHooks", "install", "server_tasks_capability"]

Ctx = ServerRequestContext[Any, Any]
Plan = Callable[[Ctx, types.CallToolRequestParams, Generation, int | None], Awaitable[McpTaskRecord | None]]
"""Create the task for this call (None: run it as an ordinary call)."""
_FIRST_TASKS_VERSION = "2025-11-25"
_RELATED_TASK = "io.modelcontextprotocol/related-task"
_LIST_CAP = 100


@dataclass(frozen=True)
class TaskHooks:
    tasks: Callable[[Ctx], McpTasks]
    principal: Callable[[], str]
    is_own_tool: Callable[[Ctx, str], bool]
    plan: Plan
    result_of: ResultOf
    relayed_create: RelayedCreate | None = None
    """Task-augmented calls of relayed tools (None: relayed tools are always ordinary calls)."""
    relayed: RelayedTasks | None = None
    """The relayed task ids remembered, and their requests to the upstreams."""


class _TaskIdParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class _UpdateParams(_TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


def server_tasks_capability() -> types.ServerTasksCapability:
    """What a 2025-11-25 ``initialize`` advertises: list, cancel and task-augmented ``tools/call``."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(),
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _not_found(task_id: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, "Failed to retrieve task: Task not found", {"taskId": task_id})


def _generation_of(ctx: Ctx) -> Generation:
    """Which task methods this request may use: v2 needs the extension declared on the request itself."""
    if _modern(ctx):
        if not declares_extension(ctx.params):
            raise MCPError(
                MISSING_CAPABILITY, "Missing required client capability", missing_capability_data()
            )
        return "v2"
    if ctx.protocol_version < _FIRST_TASKS_VERSION:
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
    return "v1"


def _stamp(server: Server[Any], ctx: Ctx, result: dict[str, Any]) -> dict[str, Any]:
    if _modern(ctx):
        result["_meta"] = {types.SERVER_INFO_META_KEY: server.server_info_stamp}
    return result


def _stamp_relayed(server: Server[Any], ctx: Ctx, answer: dict[str, Any] | BaseModel) -> dict[str, Any]:
    """An answer about a relayed task as the caller gets it: the upstream's untouched, but on 2026-07-28
    with the gateway's ``serverInfo`` stamp (the gateway answers, as for its own tasks) beside the other
    ``_meta`` keys; an answer of the gateway's own (a refusal) in the wire form a handler's would have."""
    result = (
        answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(answer, BaseModel)
        else dict(answer)
    )
    if _modern(ctx):
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        kept = dict(meta) if isinstance(meta, Mapping) else {}
        result["_meta"] = {**kept, types.SERVER_INFO_META_KEY: server.server_info_stamp}
    return result


def install(server: Server[Any], hooks: TaskHooks) -> None:
    """Register the task methods and the ``tools/call`` middleware on ``server``."""
    server.extensions[EXTENSION_ID] = {}

    async def intercept(ctx: Ctx, call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call" or not isinstance(ctx.params, Mapping):
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(ctx.params, by_name=False)
        except ValueError:
            return await call_next(ctx)  # the SDK's own validation answers it
        tasks = hooks.tasks(ctx)
        own = hooks.is_own_tool(ctx, params.name)
        asks = declares_extension(ctx.params) if _modern(ctx) else params.task is not None
        if not own and asks and hooks.relayed_create is not None:  # the upstream's own task, if it has them
            generation: Generation = "v2" if _modern(ctx) else "v1"
            ttl = params.task.ttl if params.task is not None and generation == "v1" else None
            answer = await hooks.relayed_create(ctx, params, generation, ttl)
            if answer is not None:
                return _stamp_relayed(server, ctx, answer)
        if _modern(ctx):
            arguments = params.arguments or {}
            if not (
                own and declares_extension(ctx.params) and wants_task(tasks.settings, params.name, arguments)
            ):
                return await call_next(ctx)
            record = await hooks.plan(ctx, params, "v2", None)
            return await call_next(ctx) if record is None else _stamp(server, ctx, created_v2(record))
        if params.task is None or not own:
            return await call_next(ctx)  # an upstream without (these) tasks: an ordinary relayed call
        if not may_run_as_task(tasks.settings, params.name):
            raise MCPError(types.METHOD_NOT_FOUND, f"tool {params.name!r} does not support task execution")
        record = await hooks.plan(ctx, params, "v1", params.task.ttl)
        return await call_next(ctx) if record is None else created_v1(record)

    server.middleware.append(intercept)

    def find(ctx: Ctx, task_id: str, *, poll: bool = False) -> McpTaskRecord:
        """The caller's task (a poll is counted and audited); another caller's is "not found"."""
        tasks, who = hooks.tasks(ctx), hooks.principal()
        try:
            return tasks.get(task_id, who) if poll else tasks.store.find(task_id, who)
        except McpTaskNotFound:
            raise _not_found(task_id) from None

    def relayed(task_id: str, generation: Generation) -> tuple[RelayedTasks, RelayedTask] | None:
        """The caller's relayed task of this era, with the requests that reach its upstream."""
        book = hooks.relayed
        task = book.map.find(task_id, hooks.principal(), generation) if book is not None else None
        return (book, task) if book is not None and task is not None else None

    async def get(ctx: Ctx, params: _TaskIdParams) -> dict[str, Any]:
        generation = _generation_of(ctx)
        if (via := relayed(params.task_id, generation)) is not None:
            return _stamp_relayed(server, ctx, await via[0].get(via[1]))
        record = find(ctx, params.task_id, poll=True)
        return task_v1(record) if generation == "v1" else detailed_v2(record, hooks.result_of)

    async def result(ctx: Ctx, params: _TaskIdParams) -> dict[str, Any]:
        if _generation_of(ctx) != "v1":
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        if (via := relayed(params.task_id, "v1")) is not None:
            return await via[0].result(via[1])
        find(ctx, params.task_id)
        try:
            record = await hooks.tasks(ctx).wait_terminal(params.task_id, hooks.principal())
        except McpTaskNotFound:
            raise _not_found(params.task_id) from None
        if record.status == "failed":
            error = record.error or {}
            raise MCPError(int(error.get("code", types.INTERNAL_ERROR)), str(error.get("message", "failed")))
        if record.status == "cancelled":
            raise MCPError(types.INVALID_PARAMS, f"task {record.id} was cancelled: it has no result")
        out = {k: v for k, v in hooks.result_of(record).items() if k != "resultType"}  # a 2025-11-25 result
        return {**out, "_meta": {**out.get("_meta", {}), _RELATED_TASK: {"taskId": record.id}}}

    async def listing(ctx: Ctx, params: types.PaginatedRequestParams) -> dict[str, Any]:
        if _generation_of(ctx) != "v1":
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        records = hooks.tasks(ctx).list_for(hooks.principal())
        own = [task_v1(r) for r in records[:_LIST_CAP]]
        book = hooks.relayed
        more = await book.listing(hooks.principal(), _LIST_CAP - len(own)) if book is not None else []
        return {"tasks": own + more}

    async def cancel(ctx: Ctx, params: _TaskIdParams) -> dict[str, Any]:
        generation = _generation_of(ctx)
        if (via := relayed(params.task_id, generation)) is not None:
            return _stamp_relayed(server, ctx, await via[0].cancel(via[1]))
        record = find(ctx, params.task_id)
        if record.terminal and generation == "v1":
            raise MCPError(
                types.INVALID_PARAMS, f"Cannot cancel task: already in terminal status {record.status!r}"
            )
        try:
            record = await hooks.tasks(ctx).cancel(params.task_id, hooks.principal())
        except McpTaskNotFound:
            raise _not_found(params.task_id) from None
        return task_v1(record) if generation == "v1" else {}

    async def update(ctx: Ctx, params: _UpdateParams) -> dict[str, Any]:
        if _generation_of(ctx) != "v2":
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        if (via := relayed(params.task_id, "v2")) is not None:
            return _stamp_relayed(server, ctx, await via[0].update(via[1], params.input_responses))
        find(ctx, params.task_id)
        try:
            await hooks.tasks(ctx).update(params.task_id, hooks.principal(), params.input_responses)
        except McpTaskNotFound:
            raise _not_found(params.task_id) from None
        return {}

    server.add_request_handler("tasks/get", _TaskIdParams, get)
    server.add_request_handler("tasks/result", _TaskIdParams, result)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, listing)
    server.add_request_handler("tasks/cancel", _TaskIdParams, cancel)
    server.add_request_handler("tasks/update", _UpdateParams, update)
