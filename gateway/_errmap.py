"""The one place where exceptions from remoteops and upstream become tool errors.

``translate(exc)`` returns a :class:`ToolFailure` for every exception family the gateway knows, and
``None`` for anything unexpected (the dispatcher turns that into ``internal_error`` with an incident id).
"""

from __future__ import annotations

from gateway._errors import ErrorCode, ToolFailure
from remoteops import (
    AuthError,
    ChecksumMismatch,
    CommandTimeout,
    ConnectError,
    DestinationExists,
    HostKeyError,
    InvalidRequest,
    MissingCapability,
    PathNotFound,
    PolicyDenied,
    ProbeError,
    RemoteOpsError,
    RemoteShellError,
    TransferFailed,
    TransferPathError,
    TransportError,
    TransportLost,
    UnknownTarget,
)
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


_REMOTE_CODES: tuple[tuple[type[RemoteOpsError], ErrorCode], ...] = (
    (InvalidRequest, ErrorCode.VALIDATION_ERROR),
    (PolicyDenied, ErrorCode.POLICY_DENIED),
    (UnknownTarget, ErrorCode.UNKNOWN_TARGET),
    (HostKeyError, ErrorCode.HOST_KEY_ERROR),
    (AuthError, ErrorCode.AUTH_ERROR),
    (ConnectError, ErrorCode.CONNECT_ERROR),
    (TransportLost, ErrorCode.TRANSPORT_LOST),
    (RemoteShellError, ErrorCode.REMOTE_NONZERO_EXIT),
    (CommandTimeout, ErrorCode.TIMEOUT),
    (ProbeError, ErrorCode.MISSING_REMOTE_CAPABILITY),
    (ChecksumMismatch, ErrorCode.CHECKSUM_MISMATCH),
    (MissingCapability, ErrorCode.MISSING_REMOTE_CAPABILITY),
    (DestinationExists, ErrorCode.CONFLICT),
    (PathNotFound, ErrorCode.NOT_FOUND),
    (TransferPathError, ErrorCode.CONFLICT),
    (TransferFailed, ErrorCode.REMOTE_NONZERO_EXIT),
    (TransportError, ErrorCode.CONNECT_ERROR),
)


def _remote(exc: RemoteOpsError) -> ToolFailure:
    code = next(code for cls, code in _REMOTE_CODES if isinstance(exc, cls))
    details: dict[str, object] = {"target": exc.target, "detail": exc.detail}
    fields: tuple[str, ...] = (
        "field", "reason", "stage", "command_started", "exit_code", "time_limit_s", "remote_killed",
    )  # fmt: skip
    fields += ("path", "side", "capability", "mismatched", "destination_action", "aside", "leftover")
    fields += ("needed_bytes", "available_bytes", "floor_bytes")
    for field in fields:
        if hasattr(exc, field):
            details[field] = getattr(exc, field)
    if isinstance(exc, TransportLost):
        details["may_have_run"] = True
    message = {
        ErrorCode.TRANSPORT_LOST: "the SSH connection was lost while the command may have been running; "
        "it may or may not have run and was not re-run",
        ErrorCode.TIMEOUT: "the time limit was reached without a clean end of the remote command",
    }.get(code, exc.detail or type(exc).__name__)
    return ToolFailure(code, message, retryable=exc.retryable, details=details)


def translate(exc: BaseException) -> ToolFailure | None:
    if isinstance(exc, ToolFailure):
        return exc
    if isinstance(exc, RemoteOpsError):
        return _remote(exc)
    if isinstance(exc, UpstreamError):
        return _upstream(exc)
    return None
