"""Relayed upstream tasks on the gateway's server: a task-augmented call of a relayed tool, end to end.

When the tool's upstream offers tasks in the caller's era (``gateway.mcptasks.relayed``), the call takes the
dispatcher's whole path (policy, argument caps, approval rules, the ``tool_call`` audit record) and is sent
to the upstream asking for a task; the upstream's answer is returned as it came, and a task it created is
remembered for the ``tasks/*`` methods. A call the dispatcher refuses, or an upstream failure, is answered
exactly as an ordinary relayed call's would be (an ``isError`` result; the upstream's JSON-RPC error
unchanged). Any other call is not this module's: it is relayed as an ordinary call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from gateway._dispatch import dispatch_call
from gateway._runtime import Runtime
from gateway.auth.policy import Policy, Principal
from gateway.mcptasks import Generation, RelayedCreate, RelayedTask, RelayedTasks, created_task_id
from gateway.relay.tools import RelayedTool
from upstream import ElicitCallback, ProgressCallback

__all__ = ["relayed_create"]


def relayed_create(
    rt: Runtime, principal: Callable[[], Principal], policy: Callable[[], Policy], book: RelayedTasks
) -> RelayedCreate:
    """The ``TaskHooks.relayed_create`` hook of ``rt``."""

    async def create(
        ctx: Any, params: types.CallToolRequestParams, generation: Generation, ttl_ms: int | None
    ) -> dict[str, Any] | BaseModel | None:
        tool = await rt.relay.resolve(params.name)
        if tool is None or rt.relay.tasks_of(tool).era != generation:
            return None  # not relayed, or its upstream has no tasks of this era: an ordinary relayed call
        answers: list[dict[str, Any]] = []

        async def send(
            relayed: RelayedTool,
            call: types.CallToolRequestParams,
            progress: ProgressCallback | None,
            elicit: ElicitCallback | None,
        ) -> types.CallToolResult:
            answer = await rt.relay.call_task(
                relayed, call, generation, ttl_ms=ttl_ms, progress=progress, elicit=elicit
            )
            answers.append(answer)
            # What the dispatcher audits (ok / tool_error); the caller gets the upstream's answer itself.
            return types.CallToolResult(content=[], is_error=answer.get("isError") is True)

        who = principal()
        result = await dispatch_call(rt, params, principal=who, policy=policy(), relay_call=send)
        if not answers:
            return result  # it never reached the upstream: the gateway's own answer (a refusal, an error)
        answer = answers[0]
        task_id = created_task_id(answer, generation)
        if task_id is not None:
            name = rt.relay.upstream_name(tool.upstream_index)
            task = RelayedTask(task_id, name, tool.upstream_index, who.label, generation, params.name)
            book.created(task, answer)
        return answer

    return create
