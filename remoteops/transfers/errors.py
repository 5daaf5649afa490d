"""The transfer failures, each a branch of the remoteops tree (``remoteops._errors``)::

    RemoteOpsError
    ├── PolicyDenied
    │   ├── LocalPathDenied      path, reason: "outside_roots" | "dotdot" | "no_roots" | "not_utf8" ...
    │   └── FreeSpaceFloor       needed_bytes, available_bytes, floor_bytes: a download would leave the
    │                            local file system below the configured free-space floor; nothing started
    ├── ProbeError
    │   └── MissingCapability
    │       └── TransferCapabilityMissing  capability ("rsync", "sha256sum", "scp"), side ("local" | "remote")
    ├── TransferPathError        path, side, reason: "not_found" | "exists" | "not_a_directory" |
    │   │                        "is_a_directory" | "parent_missing" | "unsupported_type"
    │   ├── PathNotFound         reason "not_found" (the source) or "parent_missing" (the destination's)
    │   └── DestinationExists    reason="exists" (overwrite policy "fail")
    ├── TransferFailed           exit_code, stage ("rsync" | "scp" | "mkdir" | "hash" ...); the native tool
    │                            failed for a reason that is not ssh's own; ``leftover`` says what is left
    └── ChecksumMismatch         mismatched: [relative paths], destination_action ("renamed_aside" ...),
                                 aside: [where the bad copies were moved]; no bad file keeps its name

ssh's own failures inside an rsync/scp run are classified like exec's (``classify_ssh_failure``).
"""

from __future__ import annotations

from typing import Any, Literal

from remoteops._errors import MissingCapability, PolicyDenied, RemoteOpsError

__all__ = [
    "ChecksumMismatch",
    "DestinationExists",
    "FreeSpaceFloor",
    "LocalPathDenied",
    "PathNotFound",
    "Side",
    "TransferCapabilityMissing",
    "TransferFailed",
    "TransferPathError",
]

Side = Literal["local", "remote"]


class LocalPathDenied(PolicyDenied):
    """A local path outside the configured local roots (after resolving symlinks), or one using ``..``."""

    def __init__(self, detail: str, *, path: str, reason: str, target: str | None = None) -> None:
        super().__init__(detail, target=target, reason=reason)
        self.path = path


class FreeSpaceFloor(PolicyDenied):
    def __init__(
        self, detail: str, *, target: str, needed_bytes: int, available_bytes: int, floor_bytes: int
    ) -> None:
        super().__init__(detail, target=target, reason="free_space_floor")
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
        self.floor_bytes = floor_bytes


class TransferCapabilityMissing(MissingCapability):
    """A transfer needs a program one side lacks (remoteops' ``MissingCapability``, plus the side)."""

    def __init__(self, detail: str, *, target: str | None, capability: str, side: Side) -> None:
        super().__init__(detail, target=target, capability=capability)
        self.side = side


class TransferPathError(RemoteOpsError):
    def __init__(self, detail: str, *, target: str | None, path: str, side: Side, reason: str) -> None:
        super().__init__(detail, target=target)
        self.path = path
        self.side = side
        self.reason = reason


class PathNotFound(TransferPathError):
    pass


class DestinationExists(TransferPathError):
    def __init__(self, detail: str, *, target: str | None, path: str, side: Side) -> None:
        super().__init__(detail, target=target, path=path, side=side, reason="exists")


class TransferFailed(RemoteOpsError):
    def __init__(
        self,
        detail: str,
        *,
        target: str | None,
        stage: str,
        exit_code: int | None,
        leftover: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, target=target)
        self.stage = stage
        self.exit_code = exit_code
        self.leftover = leftover


class ChecksumMismatch(RemoteOpsError):
    def __init__(
        self,
        detail: str,
        *,
        target: str | None,
        mismatched: list[str],
        destination_action: str,
        aside: list[str],
    ) -> None:
        super().__init__(detail, target=target)
        self.mismatched = mismatched
        self.destination_action = destination_action
        self.aside = aside
