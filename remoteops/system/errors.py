"""Failures of system inspection and process signalling; part of the remoteops exception tree::

RemoteOpsError
├── SystemInspectError            stage: the operation (info, processes, ports, disk, gpu, signal)
│   ├── ProcessNotFound           pid: no such process (it ended)
│   ├── ProcessMismatch           pid, expected, actual: the PID now names another process (recycled)
│   ├── SignalDenied              pid, denial: the login user may not signal it (``privilege: user``)
│   ├── InspectPathNotFound       path: the path to break down does not exist
│   └── SystemRemoteError         exit_code: a program of the operation failed on the target
└── ProbeError
    └── MissingCapability
        └── SystemCapabilityMissing   capability: the target lacks the program (nvidia-smi, ss, df)
"""

from __future__ import annotations

from typing import Any

from remoteops._errors import MissingCapability, RemoteOpsError

__all__ = [
    "InspectPathNotFound",
    "ProcessMismatch",
    "ProcessNotFound",
    "SignalDenied",
    "SystemCapabilityMissing",
    "SystemInspectError",
    "SystemRemoteError",
]


class SystemInspectError(RemoteOpsError):
    def __init__(self, detail: str = "", *, target: str | None = None, stage: str) -> None:
        super().__init__(detail, target=target)
        self.stage = stage


class ProcessNotFound(SystemInspectError):
    def __init__(self, detail: str = "", *, target: str | None = None, pid: int) -> None:
        super().__init__(detail, target=target, stage="signal")
        self.pid = pid


class ProcessMismatch(SystemInspectError):
    """The PID no longer names the process the caller saw: nothing was signalled."""

    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        pid: int,
        expected: dict[str, Any],
        actual: dict[str, Any],
    ) -> None:
        super().__init__(detail, target=target, stage="signal")
        self.pid = pid
        self.expected = expected
        self.actual = actual


class SignalDenied(SystemInspectError):
    def __init__(self, detail: str = "", *, target: str | None = None, pid: int, denial: str) -> None:
        super().__init__(detail, target=target, stage="signal")
        self.pid = pid
        self.denial = denial


class InspectPathNotFound(SystemInspectError):
    def __init__(self, detail: str = "", *, target: str | None = None, path: str) -> None:
        super().__init__(detail, target=target, stage="disk")
        self.path = path


class SystemRemoteError(SystemInspectError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, stage: str, exit_code: int | None
    ) -> None:
        super().__init__(detail, target=target, stage=stage)
        self.exit_code = exit_code


class SystemCapabilityMissing(MissingCapability):
    """The target lacks a program the operation needs; nothing of the caller's ran."""
