"""MCP tasks on the gateway's server: the hooks :mod:`gateway.mcptasks` needs from the rest of the gateway.

* **plan** — a ``remote_exec`` that passes every check a direct call makes first (arguments, policy,
  argument caps; no ``stdin``, which a detached task cannot take; no ``[[approvals.rules]]`` match, whose
  human decision only the dispatcher's gate asks for) starts as a remote task; any other own
  tool runs its ordinary dispatch as local work. A remote start that fails gives a task completed with the
  same error result a direct call would have returned (nothing is ever started twice).
* **result_of** — a completed task's ``CallToolResult``, rendered like the direct call's (text, structured
  content, output scrubbing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from gateway._dispatch import (
    REDACTED_META_KEY,
    dispatch_call,
    error_result,
    oversized_argument,
    scrub_output,
    unencodable_argument,
)
from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from gateway._runtime import Runtime
from gateway.approvals.gate import needs_approval
from gateway.auth.policy import Policy, Principal
from gateway.mcptasks import Generation, McpTaskRecord, RelayedTasks, RemoteCommand, TaskHooks
from gateway.serving.relayed_tasks import relayed_create
from gateway.tools.remote import ExecIn, render_exec
from remoteops import ExecResult

__all__ = ["task_hooks"]

Ctx = Any


def _remote_command(
    rt: Runtime, policy: Policy, who: Principal, arguments: dict[str, Any]
) -> RemoteCommand | None:
    """The command, when the call would pass the checks of a direct ``remote_exec``; else None."""
    spec = rt.catalog.get("remote_exec")
    if spec is None:
        return None
    try:
        args = ExecIn.model_validate(arguments)
        policy.check_call(who, tool="remote_exec", toolset=spec.toolset.value, target=args.target)
        rt.remote.target(args.target)
    except (ValidationError, ToolFailure, Exception):
        return None
    call = types.CallToolRequestParams(name="remote_exec", arguments=arguments)
    if needs_approval(rt, who, spec.toolset.value, call):
        return None  # [[approvals.rules]]: the ordinary call path, whose gate waits for a human
    cap = rt.settings.server.max_argument_bytes
    if args.stdin is not None or oversized_argument(arguments, cap) or unencodable_argument(arguments):
        return None
    timeout = args.timeout_s if args.timeout_s is not None else rt.settings.transport.exec_timeout_default_s
    if timeout > rt.settings.transport.exec_timeout_max_s:
        return None
    return RemoteCommand(args.target, args.argv, args.shell, args.cwd, dict(args.env), timeout)


def _dumped(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def task_hooks(rt: Runtime, principal: Callable[[], Principal], policy: Callable[[], Policy]) -> TaskHooks:
    """The hooks for ``rt`` (the one runtime the server's lifespan yields)."""

    def runtime(_: Ctx) -> Runtime:
        return rt

    async def plan(
        ctx: Ctx, params: types.CallToolRequestParams, generation: Generation, ttl_ms: int | None
    ) -> McpTaskRecord | None:
        rt, who, pol = runtime(ctx), principal(), policy()
        tasks = rt.mcp_tasks
        if not tasks.has_room(who.label):
            return None
        arguments: dict[str, Any] = dict(params.arguments or {})
        target = arguments.get("target") if isinstance(arguments.get("target"), str) else None
        # A call an approval rule holds goes through the dispatch (the gate, then the tool): a remote task
        # started here would skip the human (_remote_command says None for it; on 2026-07-28 it is then the
        # ordinary call, on 2025-11-25 local work).
        spec = rt.catalog.get(params.name)
        toolset = spec.toolset.value if spec is not None else "upstream"
        direct = params.name == "remote_exec"
        command = _remote_command(rt, pol, who, arguments) if direct else None
        if command is not None:
            try:
                record = await tasks.create_remote(who.label, generation, command, ttl_ms=ttl_ms)
            except Exception as exc:  # nothing ran (or it may have, and is never started again)
                failure = translate(exc) or ToolFailure(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}")
                failed = _dumped(error_result(failure, rt.redactor))

                async def report(*_: Any) -> types.CallToolResult:
                    return types.CallToolResult.model_validate(failed)

                return await tasks.create_local(
                    who.label, generation, params.name, target, report, ttl_ms=ttl_ms
                )
            rt.audit.tool_call(
                request_id=record.id,
                principal=who.label,
                tool=params.name,
                toolset=toolset,
                target=target,
                outcome="task",
                error_code=None,
                duration_ms=0.0,
                arguments=arguments,
                identity=who.audit_fields(),
                facts={"mcp_task": record.id, "remote_task": record.remote_task},
            )
            return record
        if generation == "v2" and direct:
            return None  # stdin, or a check that fails: the ordinary call answers it (as before)
        base = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        base.pop("task", None)

        async def run(progress: Any, responses: Mapping[str, Any] | None, state: str | None) -> Any:
            again = dict(base)
            if responses is not None:
                again["inputResponses"] = dict(responses)
            if state is not None:
                again["requestState"] = state
            call = types.CallToolRequestParams.model_validate(again, by_name=False)
            return await dispatch_call(
                rt,
                call,
                principal=who,
                policy=pol,
                report_progress=progress,
                input_required=generation == "v2",
            )

        return await tasks.create_local(who.label, generation, params.name, target, run, ttl_ms=ttl_ms)

    def result_of(record: McpTaskRecord) -> dict[str, Any]:
        if record.exec_result is not None:
            out = ExecResult.model_validate(record.exec_result)
            text, structured = render_exec(out), out.model_dump(mode="json")
            meta: dict[str, Any] | None = None
            if rt.settings.redaction.output == "mask":
                [text], structured, note = scrub_output(rt.redactor, [text], structured, {})
                meta = {REDACTED_META_KEY: note} if note is not None else None
            return {
                "content": [{"type": "text", "text": text}],
                "structuredContent": structured,
                "isError": False,
                **({"_meta": meta} if meta else {}),
            }
        if record.failure is not None:
            f = record.failure
            failure = ToolFailure(
                ErrorCode(f["code"]),
                str(f["message"]),
                retryable=bool(f.get("retryable")),
                details=f.get("details"),
            )
            return _dumped(error_result(failure, rt.redactor))
        return dict(record.result or {"content": [], "isError": False})

    def is_own(ctx: Ctx, name: str) -> bool:
        return runtime(ctx).catalog.get(name) is not None

    relayed = RelayedTasks(rt.relay.upstream_tasks, rt.audit, rt.redactor)  # the upstreams' own tasks
    return TaskHooks(
        tasks=lambda ctx: runtime(ctx).mcp_tasks,
        principal=lambda: principal().label,
        is_own_tool=is_own,
        plan=plan,
        result_of=result_of,
        relayed_create=relayed_create(rt, principal, policy, relayed),
        relayed=relayed,
    )
