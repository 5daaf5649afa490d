"""One tool call, end to end: find, cap, validate, run, map errors, render, audit.

Own tools are validated against their pydantic input model (unknown arguments refused) and their
results rendered as ``structuredContent`` plus a short text. Relayed tools go to their upstream with
arguments and results untouched. Every call — own or relayed, success or failure — leaves exactly one
audit record. An unexpected exception becomes ``internal_error`` with an incident id that is also logged.

A failure is an ``isError`` result **without** ``structuredContent`` (the TypeScript SDK validates
``structuredContent`` against the tool's ``outputSchema`` on error results too, and would replace the
gateway's answer by a schema error). The structured error ``{code, message, retryable, details}`` travels
twice: as JSON ``{"error": {...}}`` in the one text block, and in the result's ``_meta`` under
:data:`ERROR_META_KEY`. Its message and details pass the runtime's :class:`~gateway._redact.Redactor`.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import structlog
from mcp import MCPError
from pydantic import BaseModel, ValidationError

from gateway._catalog import AnySpec
from gateway._context import ToolContext
from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.approvals.gate import APPROVAL_KEY, ApprovalInputRequired, approval_resume, await_approval
from gateway.approvals.hub import Approval
from gateway.auth.policy import Policy, Principal
from gateway.relay.tools import RelayedTool
from gateway.secrets.broker import INPUT_KEY, Resume, UrlElicitor
from remoteops import SecretRequired
from upstream import ElicitCallback, ProgressCallback, UpstreamRejected

__all__ = [
    "ERROR_META_KEY",
    "REDACTED_META_KEY",
    "RelayCall",
    "dispatch_call",
    "error_payload",
    "error_result",
    "oversized_argument",
    "scrub_output",
    "unencodable_argument",
]

_log = structlog.get_logger("gateway.dispatch")


ERROR_META_KEY = "remoteops-gateway/error"
"""The ``_meta`` key of a failed call's structured error (a namespaced key, as the MCP spec asks)."""

REDACTED_META_KEY = "remoteops-gateway/redacted"
"""The ``_meta`` key of what ``[redaction] output = "mask"`` did to a result (never in
``structuredContent``: the tools' output schemas forbid unknown members, and clients validate them)."""

RelayCall = Callable[
    [RelayedTool, types.CallToolRequestParams, ProgressCallback | None, ElicitCallback | None],
    Awaitable[types.CallToolResult],
]
"""How a relayed tool is reached (``relay_call`` of :func:`dispatch_call`)."""

_MAX_REASONS = 5
_MAX_REASON_CHARS = 160


def _safe_text(text: str) -> str:
    """Lone surrogates (possible in Python strings, not in UTF-8) replaced, so the answer always encodes."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _wire_safe(value: Any) -> Any:
    if isinstance(value, str):
        return _safe_text(value)
    if isinstance(value, dict):
        return {_safe_text(str(k)): _wire_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wire_safe(v) for v in value]
    return value


def error_result(failure: ToolFailure, redactor: Redactor | None = None) -> types.CallToolResult:
    """The ``isError`` result for a failure: JSON text plus ``_meta``, no ``structuredContent``."""
    payload = failure.as_dict()
    if redactor is not None:  # ssh's stderr and upstream messages end up here: scrub before they leave
        payload = dict(redactor.any(payload))
    payload = _wire_safe(payload)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps({"error": payload}, ensure_ascii=False))],
        is_error=True,
        meta={ERROR_META_KEY: payload},
    )


def error_payload(result: types.CallToolResult) -> dict[str, Any] | None:
    """Read the structured error back from a result (``_meta`` first, else the JSON text); None if none."""
    if not result.is_error:
        return None
    meta = (result.meta or {}).get(ERROR_META_KEY)
    if isinstance(meta, dict):
        return meta
    for block in result.content:
        if isinstance(block, types.TextContent):
            try:
                parsed = json.loads(block.text)
            except ValueError:
                continue
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                return dict(parsed["error"])
    return None


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


def unencodable_argument(value: Any, path: str = "") -> str | None:
    """The path of the first string (or key) that is not valid Unicode (a lone surrogate), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "(root)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            found = _safe_text(sub) if unencodable_argument(key) is not None else None
            found = found or unencodable_argument(item, sub)
            if found:
                return _safe_text(found)
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = unencodable_argument(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return _clip(out or "(arguments)", 64)


def _validation_failure(name: str, exc: ValidationError) -> ToolFailure:
    """Field and reason of every error, bounded; never the offending input (it may be a misplaced secret)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    reasons = [_clip(f"{_loc(err['loc'])}: {err['msg']}", _MAX_REASON_CHARS) for err in errors]
    shown = "; ".join(reasons[:_MAX_REASONS])
    if len(reasons) > _MAX_REASONS:
        shown += f"; and {len(reasons) - _MAX_REASONS} more"
    details = {
        "errors": [
            {"loc": [str(p) for p in err["loc"]], "type": err["type"], "msg": _clip(err["msg"], 500)}
            for err in errors[:50]
        ]
    }
    return ToolFailure(ErrorCode.VALIDATION_ERROR, f"invalid arguments for {name}: {shown}", details=details)


def _validated(spec: AnySpec, arguments: dict[str, Any]) -> BaseModel:
    try:
        args: BaseModel = spec.input_model.model_validate(arguments)
        return args
    except ValidationError as exc:
        raise _validation_failure(spec.name, exc) from None


async def _run_own(spec: AnySpec, ctx: ToolContext, arguments: dict[str, Any]) -> types.CallToolResult:
    args = _validated(spec, arguments)
    output: BaseModel = await spec.handler(ctx, args)
    carried = spec.text_field
    text = spec.render(output)
    structured = output.model_dump(mode="json", exclude={carried} if carried else None)
    texts = [text, getattr(output, carried)] if carried else [text]
    meta: dict[str, Any] | None = None
    if ctx.runtime.settings.redaction.output == "mask":
        texts, structured, note = scrub_output(ctx.runtime.redactor, texts, structured, ctx.audit_facts)
        meta = {REDACTED_META_KEY: note} if note is not None else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=t) for t in texts],
        structured_content=structured,
        meta=meta,
    )


def scrub_output(
    redactor: Redactor, texts: list[str], structured: dict[str, Any], facts: dict[str, Any]
) -> tuple[list[str], dict[str, Any], dict[str, Any] | None]:
    """``[redaction] output = "mask"``: credential shapes masked in a result, never silently. Returns
    the text blocks (the rendering, then a carried field, ``ToolSpec.text_field``), the structured content
    (still valid against the tool's output schema) and the note ``{"count", "kinds"}`` for the result's
    ``_meta`` (:data:`REDACTED_META_KEY`) and the audit record's facts; the first text gains a line saying
    what was masked. A byte-exact result (``encoding = "base64"``) is left as it is, and its note says so.
    Nothing found: all as it was, no note."""
    if structured.get("encoding") == "base64":
        note: dict[str, Any] = {"count": 0, "skipped": "encoding=base64 is byte-exact: not scanned"}
        facts["redacted"] = note
        return texts, structured, note
    kinds: dict[str, int] = {}
    masked = redactor.scrub_any(structured, kinds)
    head, _ = redactor.scrub(texts[0])
    carried = redactor.scrub_any(texts[1:], kinds)
    if not kinds:
        return texts, structured, None
    note = {"count": sum(kinds.values()), "kinds": kinds}
    facts["redacted"] = note
    named = ", ".join(f"{kind}: {count}" for kind, count in sorted(kinds.items()))
    head += f"\n[output scrubbing masked {note['count']} secret(s): {named}]"
    return [head, *carried], masked, note


def _relayed_arguments(rt: Runtime, relayed: RelayedTool | None, arguments: dict[str, Any]) -> Any:
    """A relayed call's arguments as audited: digested unless its upstream has ``audit_arguments =
    "clear"`` (the values are the upstream's to interpret: a terminal's ``keys`` may be a password)."""
    upstreams = rt.settings.upstreams
    index = relayed.upstream_index if relayed is not None else -1
    if 0 <= index < len(upstreams) and upstreams[index].audit_arguments == "clear":
        return arguments
    return Redactor.digest_values(arguments)


def _resume(rt: Runtime, params: types.CallToolRequestParams, principal: Principal) -> Resume | None:
    """The password page answer of a 2026-07-28 retry, when its ``request_state`` is the broker's own."""
    answer = (params.input_responses or {}).get(INPUT_KEY)
    if params.request_state is None or not isinstance(answer, types.ElicitResult):
        return None
    return rt.secrets.resume(params.request_state, principal.label, answer.action)


async def dispatch_call(
    rt: Runtime,
    params: types.CallToolRequestParams,
    *,
    principal: Principal,
    policy: Policy,
    report_progress: ProgressCallback | None = None,
    elicit: ElicitCallback | None = None,
    elicitor: UrlElicitor | None = None,
    input_required: bool = False,
    relay_call: RelayCall | None = None,
) -> types.CallToolResult | types.InputRequiredResult:
    """``elicit`` reaches the calling client for a relayed tool's elicitation; own tools elicit only
    through ``elicitor`` (URL mode, for the one-time password page; never form mode).
    ``policy`` decides, before anything runs or connects, whether ``principal`` may call this tool on
    this target (``policy_denied`` otherwise). ``input_required``: a 2026-07-28 client that declared URL
    elicitation; a password the call needs is then asked for with an ``InputRequiredResult``.
    ``relay_call`` reaches a relayed tool instead of ``rt.relay.call`` (the relayed-task path sends a
    task-augmented call there, after every check of this function)."""
    name = params.name
    arguments: dict[str, Any] = dict(params.arguments or {})
    own = rt.catalog.get(name)
    relayed = None if own is not None else await rt.relay.resolve(name)
    disabled = rt.catalog.why_disabled(name) if own is None and relayed is None else None
    unreachable = rt.relay.never_listed() if own is None and relayed is None and disabled is None else []
    if own is None and relayed is None and disabled is None and not unreachable:
        # Unknown and filtered tools look the same: neither listed nor callable.
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
    request_id = uuid.uuid4().hex[:16]
    toolset = own.toolset.value if own is not None else disabled[1]["toolset"] if disabled else "upstream"
    target = arguments.get("target") if isinstance(arguments.get("target"), str) else None
    started = time.perf_counter()
    outcome, code, incident = "cancelled", None, None
    # Every log line of this call (ours, the runtime's, the relay's) names the caller and the request.
    log_context = structlog.contextvars.bind_contextvars(principal=principal.label, request_id=request_id)
    facts: dict[str, Any] = {}
    approved: Approval | None = None
    try:
        if disabled is not None:  # an own tool the configuration leaves out: say how to enable it
            raise ToolFailure(ErrorCode.POLICY_DENIED, disabled[0], details={"tool": name, **disabled[1]})
        policy.check_call(principal, tool=name, toolset=toolset, target=target if own is not None else None)
        cap = rt.settings.server.max_argument_bytes
        too_big = oversized_argument(arguments, cap)
        if too_big is not None:
            raise ToolFailure(
                ErrorCode.VALIDATION_ERROR,
                f"argument {too_big} exceeds {cap} bytes: put large content on a target with "
                "remote_upload (the transfer tools), not in an argument",
                details={"argument": too_big, "limit_bytes": cap, "use": "remote_upload"},
            )
        not_unicode = unencodable_argument(arguments)
        if not_unicode is not None:
            raise ToolFailure(
                ErrorCode.VALIDATION_ERROR,
                f"argument {not_unicode} is not valid Unicode (lone surrogate)",
                details={"argument": not_unicode},
            )
        if own is not None and rt.settings.approvals.rules:
            _validated(own, arguments)  # a human is never asked to approve a call that cannot run
        approved = await await_approval(  # [[approvals.rules]]: a matching call waits for a human
            rt,
            principal=principal,
            tool=name,
            toolset=toolset,
            target=target if own is not None else None,
            arguments=arguments,
            elicitor=elicitor,
            report_progress=report_progress,
            facts=facts,
            input_required=input_required,
            resume=approval_resume(rt, params, principal) if input_required else None,
        )
        if own is not None:
            ctx = ToolContext(
                runtime=rt,
                request_id=request_id,
                principal=principal.label,
                identity=principal,
                policy=policy,
                audit_facts=facts,
                elicitor=elicitor,
                resume=_resume(rt, params, principal) if input_required else None,
            )
            if report_progress is not None:
                ctx = dataclasses.replace(ctx, report_progress=report_progress)
            result = await _run_own(own, ctx, arguments)
            outcome = "ok"
        elif relayed is not None:
            try:
                if relay_call is not None:
                    result = await relay_call(relayed, params, report_progress, elicit)
                else:
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
        if approved is not None and isinstance(exc, SecretRequired):
            rt.approvals.keep(approved)  # nothing ran: the retry after the password page is still approved
        if isinstance(exc, ApprovalInputRequired):  # 2026-07-28: the approval link as a URL elicitation
            outcome, code = "input_required", ErrorCode.POLICY_DENIED.value
            url_params = types.ElicitRequestURLParams(message=exc.message, url=exc.url)
            return types.InputRequiredResult(
                input_requests={APPROVAL_KEY: types.ElicitRequest(params=url_params)},
                request_state=exc.request_state,
            )
        if input_required and isinstance(exc, SecretRequired):
            # 2026-07-28: the link goes to the client as a URL elicitation; its retry waits for the page
            outcome, code = "input_required", ErrorCode.PRIVILEGE_ERROR.value
            message = (
                f"{exc.provider} on target {exc.target!r} needs the password of account {exc.account!r}: "
                f"enter it on this one-time page (valid {exc.expires_s:g} s, single use)"
            )
            url_params = types.ElicitRequestURLParams(message=message, url=exc.entry)
            return types.InputRequiredResult(
                input_requests={INPUT_KEY: types.ElicitRequest(params=url_params)},
                request_state=rt.secrets.request_state(exc.entry, principal.label),
            )
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
        return error_result(failure, rt.redactor)
    finally:
        duration_ms = (time.perf_counter() - started) * 1000
        # The log's canonical line of the call (principal and request_id come from the bound context).
        _log.info(
            "tool_call",
            tool=name,
            toolset=toolset,
            target=target,
            outcome=outcome,
            error_code=code,
            duration_ms=round(duration_ms, 3),
        )
        rt.audit.tool_call(
            request_id=request_id,
            principal=principal.label,
            tool=name,
            toolset=toolset,
            target=target,
            outcome=outcome,
            error_code=code,
            duration_ms=duration_ms,
            arguments=arguments if own is not None else _relayed_arguments(rt, relayed, arguments),
            incident=incident,
            identity=principal.audit_fields(),
            facts=facts or None,
        )
        structlog.contextvars.reset_contextvars(**log_context)
