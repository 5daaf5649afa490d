"""One tool call, end to end: find, cap, validate, run, map errors, render, audit.

Own tools are validated against their pydantic input model (unknown arguments refused) and their
results rendered as ``structuredContent`` plus a short text. Relayed tools go to their upstream with
arguments and results untouched. Every call — own or relayed, success or failure — leaves exactly one
audit record. An unexpected exception becomes ``internal_error`` with an incident id that is also logged.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import TYPE_CHECKING, Any

import mcp_types as types
import structlog
from mcp import MCPError
from pydantic import BaseModel, ValidationError

from gateway._catalog import AnySpec
from gateway._context import ToolContext
from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from upstream import ElicitCallback, ProgressCallback, UpstreamRejected

if TYPE_CHECKING:
    from gateway._runtime import Runtime

__all__ = ["ProgressFn", "dispatch_call", "error_result", "oversized_argument"]

ProgressFn = ProgressCallback

_log = structlog.get_logger("gateway.dispatch")


def error_result(failure: ToolFailure) -> types.CallToolResult:
    payload = failure.as_dict()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{failure.code.value}: {failure.message}")],
        structured_content={"error": payload},
        is_error=True,
    )


def oversized_argument(value: Any, cap: int, path: str = "") -> str | None:
    """The path of the first string argument longer than ``cap`` bytes (UTF-8), or None."""
    if isinstance(value, str):
        return path or "(root)" if len(value.encode("utf-8", "surrogatepass")) > cap else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = oversized_argument(item, cap, f"{path}.{key}" if path else str(key))
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = oversized_argument(item, cap, f"{path}[{index}]")
            if found:
                return found
    return None


def _validation_details(exc: ValidationError) -> dict[str, Any]:
    # Never echo the offending input back: it may be a secret placed in the wrong field.
    return {
        "errors": [
            {"loc": [str(p) for p in err["loc"]], "type": err["type"], "msg": err["msg"]}
            for err in exc.errors()
        ]
    }


async def _run_own(spec: AnySpec, ctx: ToolContext, arguments: dict[str, Any]) -> types.CallToolResult:
    try:
        args = spec.input_model.model_validate(arguments)
    except ValidationError as exc:
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR, f"invalid arguments for {spec.name}", details=_validation_details(exc)
        ) from None
    output: BaseModel = await spec.handler(ctx, args)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=spec.render(output))],
        structured_content=output.model_dump(mode="json"),
    )


async def dispatch_call(
    rt: Runtime,
    params: types.CallToolRequestParams,
    *,
    principal: str,
    report_progress: ProgressFn | None = None,
    elicit: ElicitCallback | None = None,
) -> types.CallToolResult:
    """``elicit`` reaches the calling client for a relayed tool's elicitation (own tools do not elicit)."""
    name = params.name
    arguments: dict[str, Any] = dict(params.arguments or {})
    own = rt.catalog.get(name)
    relayed = None if own is not None else await rt.relay.resolve(name)
    unreachable = rt.relay.never_listed() if own is None and relayed is None else []
    if own is None and relayed is None and not unreachable:
        # Unknown and filtered tools look the same: neither listed nor callable.
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
    request_id = uuid.uuid4().hex[:16]
    toolset = own.toolset.value if own is not None else "upstream"
    target = arguments.get("target") if isinstance(arguments.get("target"), str) else None
    started = time.perf_counter()
    outcome, code, incident = "cancelled", None, None
    facts: dict[str, Any] = {}
    try:
        cap = rt.settings.server.max_argument_bytes
        too_big = oversized_argument(arguments, cap)
        if too_big is not None:
            raise ToolFailure(
                ErrorCode.VALIDATION_ERROR,
                f"argument {too_big} exceeds {cap} bytes",
                details={"argument": too_big, "limit_bytes": cap},
            )
        if own is not None:
            ctx = ToolContext(runtime=rt, request_id=request_id, principal=principal, audit_facts=facts)
            if report_progress is not None:
                ctx = dataclasses.replace(ctx, report_progress=report_progress)
            result = await _run_own(own, ctx, arguments)
            outcome = "ok"
        elif relayed is not None:
            try:
                result = await rt.relay.call(relayed, params, progress=report_progress, elicit=elicit)
            except UpstreamRejected as exc:  # the upstream's JSON-RPC error reaches the client unchanged
                raise MCPError(exc.code, exc.message, exc.data) from exc
            outcome = "tool_error" if result.is_error else "ok"
        else:
            # Possibly a relayed tool of an upstream never reached since start: say so, retryably.
            raise ToolFailure(
                ErrorCode.UPSTREAM_UNAVAILABLE,
                f"unknown tool {name!r}: upstream(s) {', '.join(unreachable)} have not been reachable since "
                "the gateway started, so their tools are not known yet",
                retryable=True,
                details={"upstreams": unreachable},
            )
        return result
    except MCPError:
        outcome, code = "upstream_rejected", None
        raise
    except Exception as exc:
        failure = translate(exc)
        if failure is None:
            incident = uuid.uuid4().hex[:12]
            _log.error("internal_error", incident=incident, tool=name, request_id=request_id, exc_info=exc)
            failure = ToolFailure(
                ErrorCode.INTERNAL_ERROR,
                f"unexpected gateway error (incident {incident})",
                details={"incident": incident},
            )
        outcome, code = "error", failure.code.value
        return error_result(failure)
    finally:
        rt.audit.tool_call(
            request_id=request_id,
            principal=principal,
            tool=name,
            toolset=toolset,
            target=target,
            outcome=outcome,
            error_code=code,
            duration_ms=(time.perf_counter() - started) * 1000,
            arguments=arguments,
            incident=incident,
            facts=facts or None,
        )
