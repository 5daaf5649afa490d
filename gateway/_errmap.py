"""The one place where exceptions from remoteops and upstream become tool errors.

``translate(exc)`` returns a :class:`ToolFailure` for every exception of the three trees the gateway
knows (``ToolFailure``, ``RemoteOpsError``, ``UpstreamError``), and ``None`` for anything else (the
dispatcher turns that into ``internal_error`` with an incident id).

Each tree has a default for a subclass this module does not list, so a new exception never escapes as a
crash: a ``RemoteOpsError`` takes the code of its nearest listed ancestor, else ``internal_error`` (with
its target and detail kept); an ``UpstreamError`` takes its nearest listed ancestor, else
``upstream_ambiguous`` — the one answer that never claims a call did not run. A test walks every subclass
of every tree and requires an explicit entry for each, so the defaults only ever catch what is new.
"""

from __future__ import annotations

import structlog

from gateway._errors import ErrorCode, ToolFailure
from remoteops import (
    AuthError,
    ChecksumMismatch,
    CommandTimeout,
    ConnectError,
    DestinationExists,
    FileAccessDenied,
    FileConflict,
    FileNotFound,
    FileRequestInvalid,
    ForwardConflict,
    ForwardError,
    ForwardNotFound,
    ForwardStartFailed,
    HostKeyError,
    InspectPathNotFound,
    InvalidRequest,
    MissingCapability,
    PathNotFound,
    PolicyDenied,
    PrivilegeError,
    ProbeError,
    ProcessMismatch,
    ProcessNotFound,
    ProtectedPath,
    RemoteFileError,
    RemoteOpsError,
    RemoteShellError,
    ScopedCapabilityMissing,
    ScopedConflict,
    ScopedError,
    ScopedNotFound,
    ScopedRemoteError,
    SecretRequired,
    SessionCapabilityMissing,
    SessionConflict,
    SessionError,
    SessionExited,
    SessionNotFound,
    SessionRemoteError,
    SignalDenied,
    SystemCapabilityMissing,
    SystemdCommandFailed,
    SystemdError,
    SystemdMissing,
    SystemInspectError,
    SystemRemoteError,
    TaskCapabilityMissing,
    TaskConflict,
    TaskError,
    TaskNotFound,
    TaskRemoteError,
    TransferFailed,
    TransferPathError,
    TransportError,
    TransportLost,
    UnitNotFound,
    UnknownTarget,
)
from upstream import (
    UpstreamAmbiguous,
    UpstreamCallTimeout,
    UpstreamClosed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamUnavailable,
)

__all__ = ["REMOTE_CODES", "UPSTREAM_CODES", "translate"]

_log = structlog.get_logger("gateway.errmap")

UPSTREAM_CODES: tuple[tuple[type[UpstreamError], ErrorCode], ...] = (
    (UpstreamUnavailable, ErrorCode.UPSTREAM_UNAVAILABLE),  # includes UpstreamSessionLost
    (UpstreamAmbiguous, ErrorCode.UPSTREAM_AMBIGUOUS),  # includes UpstreamCallTimeout
    (UpstreamProtocolError, ErrorCode.UPSTREAM_AMBIGUOUS),
    (UpstreamClosed, ErrorCode.UPSTREAM_UNAVAILABLE),  # not running: nothing was sent
    # A JSON-RPC error from the upstream normally reaches the client unchanged (the dispatcher re-raises
    # it); should one arrive here, the upstream answered and refused: it was delivered, so not retryable.
    (UpstreamRejected, ErrorCode.UPSTREAM_AMBIGUOUS),
)
"""Explicit classification, most specific first; an unlisted subclass falls back to ``upstream_ambiguous``."""


def _upstream(exc: UpstreamError) -> ToolFailure:
    details: dict[str, object] = {"upstream": exc.upstream}
    code = next((code for cls, code in UPSTREAM_CODES if isinstance(exc, cls)), None)
    if code is None:
        _log.warning("unclassified_upstream_error", error=type(exc).__name__)
        details.update(error=type(exc).__name__, may_have_run=True)
        return ToolFailure(ErrorCode.UPSTREAM_AMBIGUOUS, str(exc), retryable=False, details=details)
    if isinstance(exc, UpstreamUnavailable):
        details.update(state=exc.state, waited_s=round(exc.waited_s, 3), last_error=exc.last_error)
    elif isinstance(exc, UpstreamAmbiguous):
        details.update(tool=exc.tool, elapsed_s=round(exc.elapsed_s, 3), cause=exc.cause, may_have_run=True)
        if isinstance(exc, UpstreamCallTimeout):
            details["timeout_s"] = exc.timeout_s
    elif isinstance(exc, UpstreamProtocolError):
        details.update(method=exc.method, may_have_run=True)
    elif isinstance(exc, UpstreamRejected):
        details.update(method=exc.method, jsonrpc_code=exc.code)
    retryable = code is ErrorCode.UPSTREAM_UNAVAILABLE
    return ToolFailure(code, str(exc), retryable=retryable, details=details)


REMOTE_CODES: tuple[tuple[type[RemoteOpsError], ErrorCode], ...] = (
    (InvalidRequest, ErrorCode.VALIDATION_ERROR),
    (PolicyDenied, ErrorCode.POLICY_DENIED),
    (ForwardNotFound, ErrorCode.NOT_FOUND),
    (ForwardConflict, ErrorCode.CONFLICT),
    (ForwardStartFailed, ErrorCode.CONNECT_ERROR),  # details.reason: port_in_use, remote_refused, ...
    (ForwardError, ErrorCode.CONNECT_ERROR),
    (TaskNotFound, ErrorCode.NOT_FOUND),
    (TaskConflict, ErrorCode.CONFLICT),
    (TaskCapabilityMissing, ErrorCode.MISSING_REMOTE_CAPABILITY),
    (TaskRemoteError, ErrorCode.REMOTE_NONZERO_EXIT),
    (TaskError, ErrorCode.REMOTE_NONZERO_EXIT),  # the family's base: a task step failed on the target
    (SessionNotFound, ErrorCode.NOT_FOUND),
    (SessionExited, ErrorCode.CONFLICT),  # details.state: exited (session_ensure makes a new one)
    (SessionConflict, ErrorCode.CONFLICT),  # details.reason
    (SessionCapabilityMissing, ErrorCode.MISSING_REMOTE_CAPABILITY),
    (SessionRemoteError, ErrorCode.REMOTE_NONZERO_EXIT),
    (SessionError, ErrorCode.REMOTE_NONZERO_EXIT),  # the family's base: a session step failed on the target
    (UnitNotFound, ErrorCode.NOT_FOUND),  # details.unit
    (SystemdMissing, ErrorCode.MISSING_REMOTE_CAPABILITY),
    (SystemdCommandFailed, ErrorCode.REMOTE_NONZERO_EXIT),
    (SystemdError, ErrorCode.REMOTE_NONZERO_EXIT),  # the family's base: systemctl/journalctl failed
    # the shared shapes of the task and session families (each family's own entries above come first)
    (ScopedNotFound, ErrorCode.NOT_FOUND),
    (ScopedConflict, ErrorCode.CONFLICT),
    (ScopedCapabilityMissing, ErrorCode.MISSING_REMOTE_CAPABILITY),
    (ScopedRemoteError, ErrorCode.REMOTE_NONZERO_EXIT),
    (ScopedError, ErrorCode.REMOTE_NONZERO_EXIT),
    (ProcessNotFound, ErrorCode.NOT_FOUND),
    (ProcessMismatch, ErrorCode.CONFLICT),  # details.expected / actual: a recycled PID, nothing sent
    (SignalDenied, ErrorCode.PRIVILEGE_ERROR),
    (InspectPathNotFound, ErrorCode.NOT_FOUND),
    (SystemRemoteError, ErrorCode.REMOTE_NONZERO_EXIT),
    (SystemInspectError, ErrorCode.REMOTE_NONZERO_EXIT),
    (SystemCapabilityMissing, ErrorCode.MISSING_REMOTE_CAPABILITY),
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
    (FileNotFound, ErrorCode.NOT_FOUND),
    (FileAccessDenied, ErrorCode.PRIVILEGE_ERROR),  # EACCES / EPERM for the login user
    (FileConflict, ErrorCode.CONFLICT),
    (FileRequestInvalid, ErrorCode.VALIDATION_ERROR),
    (ProtectedPath, ErrorCode.POLICY_DENIED),
    (RemoteFileError, ErrorCode.REMOTE_NONZERO_EXIT),  # another errno (ENOSPC, EROFS, ...): details.errno
    (SecretRequired, ErrorCode.PRIVILEGE_ERROR),  # the message carries the one-time entry link
    (PrivilegeError, ErrorCode.PRIVILEGE_ERROR),  # details.reason, provider, attempts
)
"""Explicit classification, most specific first; an unlisted direct subclass of ``RemoteOpsError``
falls back to ``internal_error`` (logged, with its target and detail)."""


def _remote(exc: RemoteOpsError) -> ToolFailure:
    code = next((code for cls, code in REMOTE_CODES if isinstance(exc, cls)), None)
    details: dict[str, object] = {"target": exc.target, "detail": exc.detail}
    if code is None:
        _log.warning("unclassified_remoteops_error", error=type(exc).__name__, target=exc.target)
        details["error"] = type(exc).__name__
        return ToolFailure(
            ErrorCode.INTERNAL_ERROR, exc.detail or type(exc).__name__, retryable=False, details=details
        )
    fields = (
        "field",
        "reason",
        "stage",
        "command_started",
        "exit_code",
        "time_limit_s",
        "remote_killed",
        "task_id",
        "state",
        "tool",
        "path",
        "side",
        "capability",
        "mismatched",
        "destination_action",
        "aside",
        "leftover",
        "needed_bytes",
        "available_bytes",
        "floor_bytes",
        "errno",
        "current_sha256",
        "hunk",
        "occurrences",
        "forward_id",
        "pid",
        "expected",
        "actual",
        "denial",
        "session",
        "provider",
        "account",
        "entry",
        "expires_s",
        "retry_after",
        "root_agent",
        "remedy",
        "configured",
    )
    for field in fields:
        if hasattr(exc, field):
            details[field] = getattr(exc, field)
    if isinstance(exc, TransportLost):
        details["may_have_run"] = True
    if isinstance(exc, PrivilegeError):
        details["attempts"] = [attempt.model_dump(mode="json") for attempt in exc.attempts]
    message = {
        ErrorCode.TRANSPORT_LOST: "the SSH connection was lost while the command may have been running; "
        "it may or may not have run and was not re-run",
        ErrorCode.TIMEOUT: "the time limit was reached without a clean end of the remote command",
    }.get(code, exc.detail or type(exc).__name__)
    if isinstance(exc, SessionNotFound):  # the way out, in the agent's terms
        message += f"; session_ensure(target, name={exc.session!r}) starts it (or adopts a running one)"
        details["use"] = "session_ensure"
    return ToolFailure(code, message, retryable=exc.retryable, details=details)


def translate(exc: BaseException) -> ToolFailure | None:
    if isinstance(exc, ToolFailure):
        return exc
    if isinstance(exc, RemoteOpsError):
        return _remote(exc)
    if isinstance(exc, UpstreamError):
        return _upstream(exc)
    return None
