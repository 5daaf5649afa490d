"""The remoteops exception tree. Every failure a caller sees is one of these; each carries fields.

::

    RemoteOpsError             target: str | None, detail: str, retryable (property)
    ├── InvalidRequest         field ("argv[0]", "env.NAME", "cwd", "time_limit_s", ...), reason: the input
    │                          cannot be run as given (NUL byte, empty program, not UTF-8, too long);
    │                          nothing was started. Also a ``ValueError``.
    ├── PolicyDenied           reason: name not configured / request outside policy; nothing was started
    ├── UnknownTarget          ``ssh -G`` could not resolve the target (bad ssh config, bad name)
    │   └── UnresolvedHost     host: the name ssh could not resolve when connecting; also a
    │                          ConnectError(reason="unknown_host"), so ``except ConnectError`` still sees it
    ├── TransportError         stage: "master" | "exec" | "connect" | "remote-shell"
    │   ├── HostKeyError       reason: "changed" | "unknown" | "other" (host keys are always checked);
    │   │                      host, fingerprint, known_hosts; detail = ssh's whole lines + what to do
    │   ├── AuthError          no credential accepted (publickey refused, ...)
    │   ├── ConnectError       reason: refused | timeout | no_route | unknown_host | closed | multiplex |
    │   │                      pool_exhausted | other -- nothing ran on the target
    │   ├── TransportLost      command_started: True (seen starting) | None (unknown). The connection died
    │   │                      while the command may have been running: ambiguous, NEVER re-run automatically
    │   └── RemoteShellError   exit_code: the login shell on the target did not start the command
    ├── ProbeError             a probe ran but its output was unusable (never cached)
    │   └── MissingCapability  capability: the target lacks what the operation needs (e.g. python3 for the
    │                          agent carrier when ``carrier = "agent"``); nothing of the caller's ran
    ├── CommandTimeout         time_limit_s, remote_killed: the local ceiling was hit without a clean end;
    │                          remote_killed says whether the remote process was confirmed stopped
    └── ScopedError            one named thing of a capability failed; ``scope`` names the attribute that
        │                      carries its name (``task_id``, ``session``)
        ├── ScopedNotFound          no such thing is recorded for the target
        ├── ScopedConflict          the thing is in a state the operation cannot act on
        ├── ScopedCapabilityMissing tool: the target lacks a program the capability needs
        └── ScopedRemoteError       stage: a program of the capability failed on the target

Each capability's failures live in its own ``errors`` module, all inside this one tree::

    RemoteOpsError
    ├── ScopedError ── TaskError, SessionError        remoteops.tasks.errors, remoteops.sessions.errors
    │                  (TaskNotFound is a TaskError and a ScopedNotFound, SessionExited a ScopedConflict, ...)
    ├── RemoteFileError (FileNotFound, FileConflict, ...)          remoteops.files.errors
    ├── ForwardError (ForwardNotFound, ForwardConflict, ...)       remoteops.forwards.errors
    ├── TransferPathError, TransferFailed, ChecksumMismatch;       remoteops.transfers.errors
    │   LocalPathDenied and FreeSpaceFloor are PolicyDenied, TransferCapabilityMissing a MissingCapability
    └── PrivilegeError (SecretRequired)                            remoteops.privilege.errors

A non-zero exit status (including 255 from the remote command) is a normal ``ExecResult``, never an exception.
"""

from __future__ import annotations

from typing import ClassVar, Literal

__all__ = [
    "AuthError",
    "CommandTimeout",
    "ConnectError",
    "ConnectReason",
    "HostKeyError",
    "InvalidRequest",
    "MissingCapability",
    "PolicyDenied",
    "ProbeError",
    "RemoteOpsError",
    "RemoteShellError",
    "ScopedCapabilityMissing",
    "ScopedConflict",
    "ScopedError",
    "ScopedNotFound",
    "ScopedRemoteError",
    "TransportError",
    "TransportLost",
    "UnknownTarget",
    "UnresolvedHost",
]

ConnectReason = Literal[
    "refused", "timeout", "no_route", "unknown_host", "closed", "multiplex", "pool_exhausted", "other"
]


class RemoteOpsError(Exception):
    """Base of every remoteops failure."""

    def __init__(self, detail: str = "", *, target: str | None = None) -> None:
        super().__init__(detail or type(self).__name__)
        self.detail = detail
        self.target = target

    @property
    def retryable(self) -> bool:
        """Whether retrying the same call can reasonably succeed without a human changing something."""
        return False


class InvalidRequest(RemoteOpsError, ValueError):
    """The request itself cannot be run: ``field`` names the offending input, ``reason`` says why (bounded).

    Raised before anything is started, so retrying the same request fails the same way.
    """

    def __init__(self, detail: str = "", *, target: str | None = None, field: str, reason: str) -> None:
        super().__init__(detail or f"{field}: {reason}", target=target)
        self.field = field
        self.reason = reason


class PolicyDenied(RemoteOpsError):
    """``configured``: for ``reason = "not_configured"``, the targets that are (the allow-list)."""

    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        reason: str = "not_configured",
        configured: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(detail, target=target)
        self.reason = reason
        if configured is not None:
            self.configured = configured


class UnknownTarget(RemoteOpsError):
    """``ssh -G`` failed for the target: the ssh configuration or the host name is unusable."""


class TransportError(RemoteOpsError):
    def __init__(self, detail: str = "", *, target: str | None = None, stage: str = "exec") -> None:
        super().__init__(detail, target=target)
        self.stage = stage


class HostKeyError(TransportError):
    """``host``: the known_hosts name ssh checked (``[127.0.0.1]:2222``); ``fingerprint``: the key the host
    sent, when ssh printed it; ``known_hosts``: the file (``path:line``) holding the offending entry."""

    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        stage: str = "connect",
        reason: Literal["changed", "unknown", "other"] = "other",
        host: str | None = None,
        fingerprint: str | None = None,
        known_hosts: str | None = None,
    ) -> None:
        super().__init__(detail, target=target, stage=stage)
        self.reason = reason
        self.host = host
        self.fingerprint = fingerprint
        self.known_hosts = known_hosts


class AuthError(TransportError):
    """``remedy``: what to do about it (also the last line of ``detail``)."""

    def __init__(
        self, detail: str = "", *, target: str | None = None, stage: str = "exec", remedy: str = ""
    ) -> None:
        super().__init__("\n".join(part for part in (detail, remedy) if part), target=target, stage=stage)
        self.remedy = remedy


class ConnectError(TransportError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        stage: str = "connect",
        reason: ConnectReason = "other",
    ) -> None:
        super().__init__(detail, target=target, stage=stage)
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.reason in ("refused", "timeout", "no_route", "closed", "pool_exhausted", "other")


class UnresolvedHost(UnknownTarget, ConnectError):
    """ssh could not resolve the target's host name (``Could not resolve hostname``); nothing ran.

    An unknown target to callers (the name is wrong), and a ConnectError with ``reason="unknown_host"`` (it
    is found when connecting), never retryable."""

    def __init__(
        self, detail: str = "", *, target: str | None = None, stage: str = "connect", host: str | None = None
    ) -> None:
        super().__init__(detail, target=target, stage=stage, reason="unknown_host")
        self.host = host


class TransportLost(TransportError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        stage: str = "exec",
        command_started: bool | None,
    ) -> None:
        super().__init__(detail, target=target, stage=stage)
        self.command_started = command_started


class RemoteShellError(TransportError):
    def __init__(self, detail: str = "", *, target: str | None = None, exit_code: int) -> None:
        super().__init__(detail, target=target, stage="remote-shell")
        self.exit_code = exit_code


class CommandTimeout(RemoteOpsError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, time_limit_s: float, remote_killed: bool
    ) -> None:
        super().__init__(detail, target=target)
        self.time_limit_s = time_limit_s
        self.remote_killed = remote_killed


class ProbeError(RemoteOpsError):
    """A capability/diagnose probe ran but exited non-zero or printed something unparseable."""


class MissingCapability(ProbeError):
    def __init__(self, detail: str = "", *, target: str | None = None, capability: str) -> None:
        super().__init__(detail, target=target)
        self.capability = capability


class ScopedError(RemoteOpsError):
    """A failure about one named thing of a capability (a task, a session) on a target.

    A family sets ``scope`` (the attribute carrying the thing's name: ``task_id``, ``session``) and a
    constructor taking that keyword; its kinds are also the kinds below, so both families share one shape."""

    scope: ClassVar[str] = "name"

    def __init__(self, detail: str = "", *, target: str | None = None, name: str | None = None) -> None:
        super().__init__(detail, target=target)
        setattr(self, self.scope, name)


class ScopedNotFound(ScopedError):
    """No such thing is recorded for the target (never made, or purged)."""


class ScopedConflict(ScopedError):
    """The thing is in a state the operation cannot act on."""


class ScopedCapabilityMissing(ScopedError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, name: str | None = None, tool: str
    ) -> None:
        super().__init__(detail, target=target, name=name)
        self.tool = tool


class ScopedRemoteError(ScopedError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, name: str | None = None, stage: str
    ) -> None:
        super().__init__(detail, target=target, name=name)
        self.stage = stage
