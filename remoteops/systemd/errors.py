"""Failures of the systemd operations; part of the remoteops exception tree::

    RemoteOpsError
    └── ScopedError (scope: ``unit``)
        └── SystemdError                unit: the unit concerned (None: the manager itself)
            ├── UnitNotFound            systemd does not know the unit (LoadState not-found), also a
            │                           ScopedNotFound
            ├── SystemdMissing          tool: systemctl / journalctl is not on the target, also a
            │                           ScopedCapabilityMissing
            ├── SystemdCommandFailed    stage: systemctl / journalctl (or the transaction's root file
            │                           program) exited non-zero for a reason other than a refused job
            │                           (whose result is a normal result), also a ScopedRemoteError
            ├── TransactionFileMissing  path: the transaction's file does not exist (read over exec),
            │                           also a ScopedNotFound
            ├── TransactionFileDenied   path, errno (EACCES): the file program was refused, also a
            │                           ScopedRemoteError (stage ``file``)
            └── TransactionFileConflict path, reason (``sha256_mismatch``: changed since it was read, not
                                        written; ``changed_during_read``), current_sha256; also a
                                        ScopedConflict. The agent's own refusals stay the file tools'
                                        errors (``remoteops.files.errors``)

A failed job (``systemctl start`` of a unit that then fails) is not an exception: the action's result
says ``job_result="failed"`` with the states before and after. A failed health gate of a transaction is
not one either: the transaction's result says what was rolled back.
"""

from __future__ import annotations

from typing import ClassVar

from remoteops._errors import (
    ScopedCapabilityMissing,
    ScopedConflict,
    ScopedError,
    ScopedNotFound,
    ScopedRemoteError,
)

__all__ = [
    "SystemdCommandFailed",
    "SystemdError",
    "SystemdMissing",
    "TransactionFileConflict",
    "TransactionFileDenied",
    "TransactionFileMissing",
    "UnitNotFound",
]


class SystemdError(ScopedError):
    scope: ClassVar[str] = "unit"

    def __init__(self, detail: str = "", *, target: str | None = None, unit: str | None = None) -> None:
        super().__init__(detail, target=target, name=unit)


class UnitNotFound(SystemdError, ScopedNotFound):
    pass


class SystemdMissing(SystemdError, ScopedCapabilityMissing):
    def __init__(
        self, detail: str = "", *, target: str | None = None, unit: str | None = None, tool: str
    ) -> None:
        ScopedCapabilityMissing.__init__(self, detail, target=target, name=unit, tool=tool)


class SystemdCommandFailed(SystemdError, ScopedRemoteError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, unit: str | None = None, stage: str
    ) -> None:
        ScopedRemoteError.__init__(self, detail, target=target, name=unit, stage=stage)


class TransactionFileMissing(SystemdError, ScopedNotFound):
    def __init__(self, detail: str = "", *, target: str | None = None, path: str) -> None:
        super().__init__(detail, target=target)
        self.path = path


class TransactionFileConflict(SystemdError, ScopedConflict):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        path: str,
        reason: str,
        current_sha256: str | None = None,
    ) -> None:
        super().__init__(detail, target=target)
        self.path = path
        self.reason = reason
        self.current_sha256 = current_sha256


class TransactionFileDenied(SystemdError, ScopedRemoteError):
    def __init__(self, detail: str = "", *, target: str | None = None, path: str) -> None:
        ScopedRemoteError.__init__(self, detail, target=target, stage="file")
        self.path = path
        self.errno = "EACCES"
