"""Transfer settings, options and results (frozen pydantic records)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Direction",
    "ItemChange",
    "Leftover",
    "Method",
    "Overwrite",
    "ProgressHook",
    "SyncOptions",
    "SyncResult",
    "TransferHooks",
    "TransferOptions",
    "TransferResult",
    "TransferSettings",
]

Direction = Literal["up", "down"]
Method = Literal["auto", "rsync", "scp"]
Overwrite = Literal["fail", "replace", "skip"]
ProgressHook = Callable[[int, int | None], Awaitable[None]]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
PARTIAL_DIR = ".rog-partial"


class TransferSettings(BaseModel):
    """The local side of transfers. No ``local_roots`` → transfers are not offered at all."""

    model_config = _FROZEN

    local_roots: tuple[Path, ...] = ()
    """Directories local paths must lie in (resolved, symlinks followed); relative local paths are taken
    relative to the first one."""
    min_free_bytes: int = Field(default=1024**3, ge=0)
    """A download that would leave less than this free on the local file system is refused."""
    rsync_binary: str = "rsync"
    scp_binary: str = "scp"
    max_changes: int = Field(default=200, ge=1, le=10_000)
    """Itemized changes (and deletions) kept in a result; the total is always counted."""
    time_limit_default_s: float = Field(default=3600, gt=0)
    time_limit_max_s: float = Field(default=86400, gt=0)
    progress_interval_s: float = Field(default=0.5, ge=0.05)
    """At most one progress notification per this interval (rsync itself updates about once a second)."""


class TransferOptions(BaseModel):
    model_config = _FROZEN

    method: Method = "auto"
    overwrite: Overwrite = "fail"
    create_parents: bool = False
    verify: Literal["sha256"] | None = None
    bwlimit_kib_s: int | None = Field(default=None, ge=1)


class SyncOptions(BaseModel):
    model_config = _FROZEN

    direction: Direction
    excludes: tuple[str, ...] = ()
    dry_run: bool = False
    delete: bool = False
    bwlimit_kib_s: int | None = Field(default=None, ge=1)


@dataclass(frozen=True)
class TransferHooks:
    """``progress(done_bytes, total_bytes)`` at most every ``progress_interval_s``; ``cancelled(leftover)``
    once when the transfer is cancelled, after every process it started is gone."""

    progress: ProgressHook | None = None
    cancelled: Callable[[Leftover], None] | None = None


class ItemChange(BaseModel):
    """One line of rsync's itemized output (``%i``): ``code`` is rsync's 11-character summary."""

    model_config = _FROZEN

    path: str
    code: str
    kind: Literal["file", "dir", "symlink", "device", "special", "other"]
    action: Literal["created", "updated", "deleted", "attributes", "hardlink", "message"]


class Leftover(BaseModel):
    """What an interrupted transfer left at the destination."""

    model_config = _FROZEN

    destination: str
    destination_exists: bool | None  # None: could not be checked
    partial_dir: str
    partial_files: int | None
    partial_bytes: int | None
    resumable: bool
    note: str


class TransferResult(BaseModel):
    model_config = _FROZEN

    target: str
    direction: Direction
    local_path: str
    remote_path: str
    kind: Literal["file", "tree"]
    method: Literal["rsync", "scp"]
    bytes_transferred: int = Field(description="File data actually sent (rsync's literal data).")
    bytes_total: int = Field(description="Size of everything the source holds.")
    files_transferred: int
    files_total: int
    duration_s: float
    throughput_bytes_s: float = Field(description="bytes_transferred / duration_s.")
    resumed: bool = Field(description="A partial file from an earlier interrupted run was found first.")
    partial_bytes_found: int = 0
    bytes_skipped: int = Field(0, description="Data not resent because the partial file had it.")
    bytes_matched: int = Field(0, description="All data rsync did not send (partial or existing copy).")
    overwrite: Overwrite
    parents_created: bool = False
    verified: Literal["sha256"] | None = None
    sha256: str | None = Field(
        None,
        description="Verified transfers: SHA-256 of the file, or of a tree's manifest (its sorted "
        "'<sha256>  <path>' lines, one per file).",
    )
    files_verified: int = 0
    changes: list[ItemChange] = Field(default_factory=list)
    changes_total: int = 0
    changes_truncated: bool = False


class SyncResult(BaseModel):
    model_config = _FROZEN

    target: str
    direction: Direction
    local_path: str
    remote_path: str
    dry_run: bool
    delete: bool
    changes: list[ItemChange] = Field(default_factory=list)
    changes_total: int = 0
    deleted: list[str] = Field(default_factory=list, description="Deleted (or, dry run: would delete).")
    deleted_total: int = 0
    truncated: bool = False
    bytes_transferred: int
    bytes_total: int
    files_transferred: int
    duration_s: float
    throughput_bytes_s: float
