"""The one place where exceptions from remoteops and upstream become tool errors.

``translate(exc)`` returns a :class:`ToolFailure` for every exception family the gateway knows, and
``None`` for anything unexpected (the dispatcher turns that into ``internal_error`` with an incident id).
"""

from __future__ import annotations

from gateway._errors import ErrorCode, ToolFailure
from upstream import (
    UpstreamAmbiguous,
    UpstreamCallTimeout,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamUnavailable,
)

__all__ = ["translate"]


def _upstream(exc: UpstreamError) -> ToolFailure:
    details: dict[str, object] = {"upstream": exc.upstream}
    if isinstance(exc, UpstreamUnavailable):
        details.update(state=exc.state, waited_s=round(exc.waited_s, 3), last_error=exc.last_error)
        return ToolFailure(ErrorCode.UPSTREAM_UNAVAILABLE, str(exc), retryable=True, details=details)
    if isinstance(exc, UpstreamAmbiguous):
        details.update(tool=exc.tool, elapsed_s=round(exc.elapsed_s, 3), cause=exc.cause, may_have_run=True)
        if isinstance(exc, UpstreamCallTimeout):
            details["timeout_s"] = exc.timeout_s
        return ToolFailure(ErrorCode.UPSTREAM_AMBIGUOUS, str(exc), retryable=False, details=details)
    if isinstance(exc, UpstreamProtocolError):
        details.update(method=exc.method, may_have_run=True)
        return ToolFailure(ErrorCode.UPSTREAM_AMBIGUOUS, str(exc), retryable=False, details=details)
    return ToolFailure(ErrorCode.UPSTREAM_UNAVAILABLE, str(exc), retryable=True, details=details)


def translate(exc: BaseException) -> ToolFailure | None:
    if isinstance(exc, ToolFailure):
        return exc
    if isinstance(exc, UpstreamError):
        return _upstream(exc)
    return None
