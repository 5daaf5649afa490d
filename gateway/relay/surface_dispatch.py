"""One relayed ``resources/read``, ``prompts/get``, ``completion/complete`` or (un)subscription, end to end.

Route (gated: ``gateway.relay.surface``), cap, relay, map errors — and, for reads and prompt gets, audit: each
leaves exactly one record (URI or prompt name, prompt arguments digested, outcome, duration), refused
ones included. These methods answer with results or JSON-RPC errors, not ``isError`` results:

* an unknown or filtered URI, prompt or completion reference → ``-32602`` (they look the same);
* an upstream's own JSON-RPC error → passed through unchanged;
* a gateway-side failure (``upstream_unavailable``, ``upstream_ambiguous``, ``validation_error``,
  ``internal_error``) → ``-32603`` whose ``data`` is the structured error ``{code, message, retryable,
  details}``, redacted — the vocabulary of tool errors.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types as types
import structlog
from mcp import MCPError

from gateway._dispatch import oversized_argument, unencodable_argument
from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from gateway._redact import digest
from upstream import Upstream, UpstreamRejected

if TYPE_CHECKING:
    from gateway._runtime import Runtime

__all__ = ["complete", "get_prompt", "read_resource", "subscribe", "unsubscribe"]

_log = structlog.get_logger("gateway.surface")

R = TypeVar("R")


class _Refused(Exception):
    """Unknown or filtered: answered ``-32602`` like an unknown tool; audited as ``refused``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _failure_error(rt: Runtime, failure: ToolFailure) -> MCPError:
    data = rt.redactor.any(failure.as_dict())
    return MCPError(types.INTERNAL_ERROR, str(data["message"]), data)


def _check_arguments(rt: Runtime, value: Any) -> None:
    cap = rt.settings.server.max_argument_bytes
    too_big = oversized_argument(value, cap)
    if too_big is not None:
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR,
            f"argument {too_big} exceeds {cap} bytes",
            details={"argument": too_big, "limit_bytes": cap},
        )
    not_unicode = unencodable_argument(value)
    if not_unicode is not None:
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR,
            f"argument {not_unicode} is not valid Unicode (lone surrogate)",
            details={"argument": not_unicode},
        )


def _unreachable(rt: Runtime, what: str) -> None:
    """Raise ``upstream_unavailable`` when an upstream never reached since start might serve ``what``."""
    never = rt.relay.surface.never_listed()
    if never:
        raise ToolFailure(
            ErrorCode.UPSTREAM_UNAVAILABLE,
            f"unknown {what}: upstream(s) {', '.join(never)} have not been reachable since the gateway "
            "started, so what they serve is not known yet",
            retryable=True,
            details={"upstreams": never},
        )


async def _relayed(
    rt: Runtime,
    run: Callable[[], Awaitable[R]],
    *,
    name: str,
    audit: Callable[[str, str | None, str | None], None] | None,
) -> R:
    """Run one relayed request; map its failure; audit it (``audit(outcome, error_code, incident)``)."""
    outcome, code, incident = "cancelled", None, None
    try:
        result = await run()
        outcome = "ok"
        return result
    except _Refused as exc:
        outcome = "refused"
        raise MCPError(types.INVALID_PARAMS, exc.message) from None
    except UpstreamRejected as exc:  # the upstream's JSON-RPC error reaches the client unchanged
        outcome = "upstream_rejected"
        raise MCPError(exc.code, exc.message, exc.data) from exc
    except MCPError:
        outcome = "rejected"
        raise
    except Exception as exc:
        failure = translate(exc)
        if failure is None:
            incident = uuid.uuid4().hex[:12]
            _log.error("internal_error", incident=incident, request=name, exc_info=exc)
            failure = ToolFailure(
                ErrorCode.INTERNAL_ERROR,
                f"unexpected gateway error (incident {incident})",
                details={"incident": incident},
            )
        outcome, code = "error", failure.code.value
        raise _failure_error(rt, failure) from None
    finally:
        if audit is not None:
            audit(outcome, code, incident)


async def read_resource(
    rt: Runtime, params: types.ReadResourceRequestParams, *, principal: str
) -> types.ReadResourceResult:
    uri = params.uri
    request_id = uuid.uuid4().hex[:16]
    started = time.perf_counter()
    target: list[Upstream] = []

    def audit(outcome: str, code: str | None, incident: str | None) -> None:
        rt.audit.relayed_request(
            "resource_read",
            request_id=request_id,
            principal=principal,
            upstream=target[0].name if target else None,
            subject={"uri": uri},
            outcome=outcome,
            error_code=code,
            duration_ms=(time.perf_counter() - started) * 1000,
            arguments=None,
            incident=incident,
        )

    async def run() -> types.ReadResourceResult:
        _check_arguments(rt, {"uri": uri})
        up = await rt.relay.surface.route_uri(uri)
        if up is None:
            _unreachable(rt, f"resource {uri!r}")
            raise _Refused(f"Unknown resource: {uri}")
        target.append(up)
        return await up.surface.read_resource(uri, meta=params.meta)

    return await _relayed(rt, run, name="resources/read", audit=audit)


async def get_prompt(
    rt: Runtime, params: types.GetPromptRequestParams, *, principal: str
) -> types.GetPromptResult:
    name = params.name
    arguments = dict(params.arguments or {})
    request_id = uuid.uuid4().hex[:16]
    started = time.perf_counter()
    target: list[Upstream] = []

    def audit(outcome: str, code: str | None, incident: str | None) -> None:
        rt.audit.relayed_request(
            "prompt_get",
            request_id=request_id,
            principal=principal,
            upstream=target[0].name if target else None,
            subject={"prompt": name},
            outcome=outcome,
            error_code=code,
            duration_ms=(time.perf_counter() - started) * 1000,
            arguments={str(key): digest(value) for key, value in arguments.items()},
            incident=incident,
        )

    async def run() -> types.GetPromptResult:
        _check_arguments(rt, arguments)
        found = await rt.relay.surface.resolve_prompt(name)
        if found is None:
            _unreachable(rt, f"prompt {name!r}")
            raise _Refused(f"Unknown prompt: {name}")
        up, route = found
        target.append(up)
        return await up.surface.get_prompt(route.original_name, params.arguments, meta=params.meta)

    return await _relayed(rt, run, name="prompts/get", audit=audit)


async def complete(rt: Runtime, params: types.CompleteRequestParams) -> types.CompleteResult:
    """Completions for a relayed prompt (by its exposed name) or a served resource template."""

    async def run() -> types.CompleteResult:
        _check_arguments(rt, params.model_dump(mode="json", by_alias=True))
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            found = await rt.relay.surface.resolve_prompt(ref.name)
            if found is None:
                raise _Refused(f"Unknown prompt: {ref.name}")
            up, route = found
            upstream_ref = ref.model_copy(update={"name": route.original_name})
            params_up = params.model_copy(update={"ref": upstream_ref})
        else:
            routed = await rt.relay.surface.route_template(ref.uri)
            if routed is None:
                raise _Refused(f"Unknown resource template: {ref.uri}")
            up, params_up = routed, params
        if not up.surface.can_complete:
            return types.CompleteResult(completion=types.Completion(values=[]))
        return await up.surface.complete(params_up)

    return await _relayed(rt, run, name="completion/complete", audit=None)


async def subscribe(rt: Runtime, uri: str) -> Upstream:
    """Subscribe upstream (the caller tracks which client wants which URI); the upstream it went to."""

    async def run() -> Upstream:
        _check_arguments(rt, {"uri": uri})
        up = await rt.relay.surface.route_uri(uri)
        if up is None:
            raise _Refused(f"Unknown resource: {uri}")
        if not up.surface.can_subscribe:
            raise MCPError(types.METHOD_NOT_FOUND, f"upstream {up.name!r} does not support subscriptions")
        await up.surface.subscribe(uri)
        return up

    return await _relayed(rt, run, name="resources/subscribe", audit=None)


async def unsubscribe(rt: Runtime, up: Upstream, uri: str) -> None:
    async def run() -> None:
        await up.surface.unsubscribe(uri)

    await _relayed(rt, run, name="resources/unsubscribe", audit=None)
