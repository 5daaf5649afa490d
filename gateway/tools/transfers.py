"""``remote_upload``, ``remote_download``, ``remote_sync`` (execute): thin adapters over
:class:`remoteops.Transfers`. Offered only when ``[transfers] local_roots`` is configured.

The tools take paths; native rsync/scp move the bytes over the target's master. Progress goes to the
caller's progress token (bytes done / total, at most every ``progress_interval_s``). A time limit
(``timeout_s``) stops the transfer and fails with ``timeout`` saying what is left at the destination; a
cancelled call logs the same report. The audit record gets paths, sizes and hashes (never file data).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal, TypeVar

import anyio
import structlog
from pydantic import BaseModel, Field

from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Input, TargetName
from gateway.tools._registry import CHANGE, ToolGroup, no_local_roots
from remoteops import (
    Leftover,
    SyncOptions,
    SyncResult,
    TransferHooks,
    TransferOptions,
    TransferResult,
    check_time_limit,
)

__all__ = ["SPECS"]


_log = structlog.get_logger("gateway.transfers")
_tools = ToolGroup(CHANGE, unavailable=no_local_roots)
SPECS = _tools.specs
ResultT = TypeVar("ResultT", bound=BaseModel)

LocalPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="Path on the gateway host; must lie under a configured local root after symlinks are "
        "resolved ('..' refused). A relative path is taken relative to the first root.",
    ),
]
RemotePath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="Path on the target, taken literally (relative: to the login home directory).",
    ),
]
TimeLimit = Annotated[
    float | None, Field(None, gt=0, description="Stop the transfer after this many seconds (default 3600).")
]
Bwlimit = Annotated[int | None, Field(None, ge=1, description="Bandwidth limit in KiB/s.")]


class CopyIn(Input):
    target: TargetName
    local_path: LocalPath
    remote_path: RemotePath
    method: Literal["auto", "rsync", "scp"] = Field(
        "auto",
        description="auto: rsync when both ends have it (resumable), else scp for a plain single file.",
    )
    overwrite: Literal["fail", "replace", "skip"] = Field(
        "fail",
        description="An existing destination: fail (conflict), replace what differs, or skip existing "
        "files (a tree's partial files are still resumed).",
    )
    create_parents: bool = Field(False, description="Create the destination's missing parent directories.")
    verify: Literal["sha256"] | None = Field(
        None, description="Hash both ends after the copy; a mismatch fails and renames the bad copy aside."
    )
    bwlimit_kib_s: Bwlimit = None
    timeout_s: TimeLimit = None


class SyncIn(Input):
    target: TargetName
    local_path: LocalPath
    remote_path: RemotePath
    direction: Literal["up", "down"] = Field(description="up: local → target; down: target → local.")
    excludes: list[str] = Field(
        default_factory=list, max_length=100, description="rsync exclude patterns (e.g. '*.log', '/build/')."
    )
    dry_run: bool = Field(False, description="List what would change; change nothing.")
    delete: bool = Field(False, description="Delete destination files the source lacks (listed).")
    bwlimit_kib_s: Bwlimit = None
    timeout_s: TimeLimit = None


def _limit(ctx: ToolContext, requested: float | None) -> float:
    settings = ctx.runtime.settings.transfers
    limit = settings.time_limit_default_s if requested is None else requested
    return check_time_limit(limit, settings.time_limit_max_s)


async def _supervise(
    ctx: ToolContext,
    tool: str,
    target: str,
    requested: float | None,
    call: Callable[[TransferHooks], Awaitable[ResultT]],
) -> ResultT:
    limit = _limit(ctx, requested)
    left: list[Leftover] = []

    broken: list[str] = []

    async def progress(done: int, total: int | None) -> None:
        if broken:
            return
        shown = f"{done} of {total} bytes" if total is not None else f"{done} bytes"
        try:
            await ctx.report_progress(float(done), float(total) if total is not None else None, shown)
        except Exception as exc:  # a client that stopped listening must not stop the transfer
            broken.append(type(exc).__name__)
            _log.debug("progress_not_delivered", tool=tool, request_id=ctx.request_id, error=broken[0])

    def cancelled(leftover: Leftover) -> None:
        left.append(leftover)
        _log.warning(
            "transfer_cancelled",
            tool=tool,
            target=target,
            request_id=ctx.request_id,
            left_at_destination=leftover.model_dump(mode="json"),
        )

    result: ResultT | None = None
    with anyio.move_on_after(limit):
        result = await call(TransferHooks(progress=progress, cancelled=cancelled))
    if result is None:
        ctx.audit_facts["left_at_destination"] = left[0].model_dump(mode="json") if left else None
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            f"the transfer was stopped at its time limit ({limit:g} s); every process it started is gone",
            details={
                "time_limit_s": limit,
                "copy_started": bool(left),  # False: stopped while probing, nothing was written
                "left_at_destination": left[0].model_dump(mode="json") if left else None,
            },
        )
    return result


def _copy_options(args: CopyIn) -> TransferOptions:
    return TransferOptions(
        method=args.method,
        overwrite=args.overwrite,
        create_parents=args.create_parents,
        verify=args.verify,
        bwlimit_kib_s=args.bwlimit_kib_s,
    )


def _audit_copy(ctx: ToolContext, out: TransferResult) -> None:
    ctx.audit_facts.update(
        local_path=out.local_path,
        remote_path=out.remote_path,
        method=out.method,
        bytes_transferred=out.bytes_transferred,
        bytes_total=out.bytes_total,
        files_transferred=out.files_transferred,
        resumed=out.resumed,
        sha256=out.sha256,
    )


def _mib_s(rate: float) -> str:
    return f"{rate / 1024 / 1024:.1f} MiB/s"


def _render_copy(out: TransferResult) -> str:
    verb = "uploaded" if out.direction == "up" else "downloaded"
    parts = [
        f"{verb} {out.bytes_transferred} of {out.bytes_total} bytes "
        f"({out.files_transferred}/{out.files_total} files) via {out.method} in {out.duration_s:.2f} s "
        f"({_mib_s(out.throughput_bytes_s)})"
    ]
    if out.resumed:
        parts.append(f"resumed: {out.bytes_skipped} bytes already there")
    if out.verified:
        parts.append(f"sha256 verified ({out.files_verified} files)")
    return "; ".join(parts)


def _render_sync(out: SyncResult) -> str:
    what = "would change" if out.dry_run else "changed"
    text = f"sync {out.direction}: {out.changes_total} item(s) {what}"
    if out.delete:
        text += f", {out.deleted_total} {'would be ' if out.dry_run else ''}deleted"
    if not out.dry_run:
        text += f"; {out.bytes_transferred} bytes sent in {out.duration_s:.2f} s"
    return text


@_tools.tool(
    "remote_upload",
    "Upload to a target",
    "Copy a file or directory tree from the gateway host (under a configured local root) to a target with "
    "native rsync over its SSH master (scp for a plain single file when rsync is missing). Interrupted "
    "copies resume (resumed: true only when a partial file was found), optional SHA-256 verification, "
    "overwrite policy, progress notifications. File data never passes through MCP.",
    render=_render_copy,
)
async def remote_upload(ctx: ToolContext, args: CopyIn) -> TransferResult:
    transfers = ctx.runtime.transfers
    out = await _supervise(
        ctx,
        "remote_upload",
        args.target,
        args.timeout_s,
        lambda hooks: transfers.upload(
            args.target, args.local_path, args.remote_path, _copy_options(args), hooks
        ),
    )
    _audit_copy(ctx, out)
    return out


@_tools.tool(
    "remote_download",
    "Download from a target",
    "Copy a file or directory tree from a target to the gateway host (under a configured local root) with "
    "native rsync over its SSH master; refused when it would break the local free-space floor. Resume on "
    "evidence, optional SHA-256 verification, progress notifications.",
    render=_render_copy,
)
async def remote_download(ctx: ToolContext, args: CopyIn) -> TransferResult:
    transfers = ctx.runtime.transfers
    out = await _supervise(
        ctx,
        "remote_download",
        args.target,
        args.timeout_s,
        lambda hooks: transfers.download(
            args.target, args.local_path, args.remote_path, _copy_options(args), hooks
        ),
    )
    _audit_copy(ctx, out)
    return out


@_tools.tool(
    "remote_sync",
    "Sync a directory tree",
    "rsync a directory tree up or down: excludes, dry_run (lists what would change, changes nothing), "
    "delete (off by default; lists what it deleted); itemized changes, bounded.",
    render=_render_sync,
)
async def remote_sync(ctx: ToolContext, args: SyncIn) -> SyncResult:
    transfers = ctx.runtime.transfers
    options = SyncOptions(
        direction=args.direction,
        excludes=tuple(args.excludes),
        dry_run=args.dry_run,
        delete=args.delete,
        bwlimit_kib_s=args.bwlimit_kib_s,
    )
    out = await _supervise(
        ctx,
        "remote_sync",
        args.target,
        args.timeout_s,
        lambda hooks: transfers.sync(args.target, args.local_path, args.remote_path, options, hooks),
    )
    ctx.audit_facts.update(
        local_path=out.local_path,
        remote_path=out.remote_path,
        direction=out.direction,
        dry_run=out.dry_run,
        bytes_transferred=out.bytes_transferred,
        bytes_total=out.bytes_total,
        changes_total=out.changes_total,
        deleted_total=out.deleted_total,
    )
    return out
