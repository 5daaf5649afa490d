"""The remoteops exception tree. Every failure a caller sees is one of these; each carries fields.

::

    RemoteOpsError             target: str | None, detail: str, retryable (property)
    ├── PolicyDenied           reason: name not configured / request outside policy; nothing was started
    ├── UnknownTarget          ``ssh -G`` could not resolve the target (bad ssh config, bad name)
    ├── TransportError         stage: "master" | "exec" | "connect" | "remote-shell"
    │   ├── HostKeyError       reason: "changed" | "unknown" | "other" (host keys are always checked)
    │   ├── AuthError          no credential accepted (publickey refused, ...)
    │   ├── ConnectError       reason: refused | timeout | no_route | unknown_host | closed | multiplex |
    │   │                      pool_exhausted | other -- nothing ran on the target
    │   ├── TransportLost      command_started: True (seen starting) | None (unknown). The connection died
    │   │                      while the command may have been running: ambiguous, NEVER re-run automatically
    │   └── RemoteShellError   exit_code: the login shell on the target did not start the command
    ├── ProbeError             a probe ran but its output was unusable (never cached)
    │   └── MissingCapability  capability: the target lacks what the operation needs (e.g. python3 for the
    │                          agent carrier when ``carrier = "agent"``); nothing of the caller's ran
    └── CommandTimeout         time_limit_s, remote_killed: the local ceiling was hit without a clean end;
                               remote_killed says whether the remote process was confirmed stopped

A non-zero exit status (including 255 from the remote command) is a normal ``ExecResult``, never an exception.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AuthError",
    "CommandTimeout",
    "ConnectError",
    "ConnectReason",
    "HostKeyError",
    "MissingCapability",
    "PolicyDenied",
    "ProbeError",
    "RemoteOpsError",
    "RemoteShellError",
    "TransportError",
    "TransportLost",
    "UnknownTarget",
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


class PolicyDenied(RemoteOpsError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, reason: str = "not_configured"
    ) -> None:
        super().__init__(detail, target=target)
        self.reason = reason


class UnknownTarget(RemoteOpsError):
    """``ssh -G`` failed for the target: the ssh configuration or the host name is unusable."""


class TransportError(RemoteOpsError):
    def __init__(self, detail: str = "", *, target: str | None = None, stage: str = "exec") -> None:
        super().__init__(detail, target=target)
        self.stage = stage


class HostKeyError(TransportError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        stage: str = "connect",
        reason: Literal["changed", "unknown", "other"] = "other",
    ) -> None:
        super().__init__(detail, target=target, stage=stage)
        self.reason = reason


class AuthError(TransportError):
    pass


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
