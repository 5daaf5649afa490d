"""Transfers between the gateway host and targets: ``upload``, ``download`` and ``sync``.

The bytes never pass through Python: native ``rsync`` (or ``scp`` for a plain single file when rsync is
missing) moves them over the target's ControlMaster, with ssh options built by the same ``SshArgs`` exec
uses (``-F``, BatchMode, ConnectTimeout, host-key policy, ``ProxyCommand=false`` against a silent direct
fallback). One channel slot of the target is held for the whole transfer.

Resume is on evidence: rsync keeps interrupted files in ``.rog-partial`` next to the destination and reuses
them; ``resumed`` is reported only when such a partial file was found *before* the transfer started.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio

from ._errors import InvalidRequest
from ._settings import TargetSpec, TransportSettings
from ._sshargs import SshArgs
from ._transfer_errors import (
    DestinationExists,
    FreeSpaceFloor,
    MissingCapability,
    PathNotFound,
    Side,
    TransferPathError,
)
from ._transfer_models import (
    PARTIAL_DIR,
    Direction,
    Leftover,
    SyncOptions,
    SyncResult,
    TransferHooks,
    TransferOptions,
    TransferResult,
    TransferSettings,
)
from ._transfer_paths import (
    LocalRoots,
    escape_rsync_source,
    remote_arg,
    rsh_command,
    scp_options,
    ssh_prefix,
    validate_remote_path,
)
from ._transfer_probe import Probe, local_probe, remote_probe, split_remote
from ._transfer_run import RunOutcome, failure, run_tool
from ._transfer_verify import verify_transfer

if TYPE_CHECKING:
    from ._ops import RemoteOps

__all__ = ["Transfers"]

_PLAIN_REMOTE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+@,=%-")
_LEFTOVER_S = 10.0
_MAX_EXCLUDES = 100


class Transfers:
    """Transfers over a :class:`RemoteOps` (which must be entered). ``enabled`` is False without roots."""

    def __init__(self, ops: RemoteOps, transport: TransportSettings, settings: TransferSettings) -> None:
        """``transport`` must be the settings ``ops`` was made with (rsync/scp get the same ssh options)."""
        self._ops = ops
        self._settings = settings
        self._hash_ceiling_s = transport.exec_timeout_max_s
        self.roots = LocalRoots(settings.local_roots)
        self._args = SshArgs(transport)

    @property
    def enabled(self) -> bool:
        return bool(self.roots)

    # -- public ----------------------------------------------------------------------------------------------
    async def upload(
        self, target: str, local_path: str, remote_path: str, options: TransferOptions, hooks: TransferHooks
    ) -> TransferResult:
        return await self._copy("up", target, local_path, remote_path, options, hooks)

    async def download(
        self, target: str, local_path: str, remote_path: str, options: TransferOptions, hooks: TransferHooks
    ) -> TransferResult:
        return await self._copy("down", target, local_path, remote_path, options, hooks)

    async def sync(
        self, target: str, local_path: str, remote_path: str, options: SyncOptions, hooks: TransferHooks
    ) -> SyncResult:
        """rsync a directory tree in ``options.direction``; ``delete`` removes what the source lacks."""
        self._ops.target(target)
        for pattern in options.excludes:
            if not pattern or len(pattern) > 1024 or any(ch in pattern for ch in "\n\r\x00"):
                raise InvalidRequest(target=target, field="excludes", reason="empty, too long or multi-line")
        if len(options.excludes) > _MAX_EXCLUDES:
            raise InvalidRequest(target=target, field="excludes", reason=f"more than {_MAX_EXCLUDES}")
        local = self.roots.resolve(local_path, target=target)
        remote = validate_remote_path(_strip(remote_path), target=target)
        up = options.direction == "up"
        await self._need_rsync(target)
        lprobe, _ = await local_probe(local)
        rprobe = await remote_probe(self._ops, target, remote)
        src, dst = (lprobe, rprobe) if up else (rprobe, lprobe)
        src_side: Side = "local" if up else "remote"
        if src.kind != "dir":
            raise (PathNotFound if src.kind == "none" else TransferPathError)(
                "the sync source must be a directory",
                target=target,
                path=str(local) if up else remote,
                side=src_side,
                reason="not_found" if src.kind == "none" else "not_a_directory",
            )
        if dst.kind not in ("dir", "none"):
            raise TransferPathError(
                "the sync destination is not a directory",
                target=target,
                path=remote if up else str(local),
                side="remote" if up else "local",
                reason="not_a_directory",
            )
        if not up and not options.dry_run:
            self._check_free_space(target, local, rprobe.size)
        extra = [f"--exclude={p}" for p in options.excludes]
        if options.delete:
            extra.append("--delete")
        if options.dry_run:
            extra.append("--dry-run")
        flags = self._flags(tree=True, down=not up, ignore_existing=False, bwlimit=options.bwlimit_kib_s)
        outcome = await self._rsync(
            target, local, remote, up=up, tree=True, flags=[*flags, *extra], total=src.size, hooks=hooks
        )
        return SyncResult(
            target=target,
            direction=options.direction,
            local_path=str(local),
            remote_path=remote,
            dry_run=options.dry_run,
            delete=options.delete,
            changes=outcome.changes,
            changes_total=outcome.changes_total,
            deleted=outcome.deleted,
            deleted_total=outcome.deleted_total,
            truncated=outcome.changes_total > len(outcome.changes),
            bytes_transferred=0 if options.dry_run else outcome.stats.get("literal", 0),
            bytes_total=outcome.stats.get("total_size", src.size),
            files_transferred=outcome.stats.get("files_transferred", 0),
            duration_s=round(outcome.duration_s, 3),
            throughput_bytes_s=_rate(0 if options.dry_run else outcome.stats.get("literal", 0), outcome),
        )

    # -- upload / download -----------------------------------------------------------------------------------
    async def _copy(
        self,
        direction: Direction,
        target: str,
        local_path: str,
        remote_path: str,
        options: TransferOptions,
        hooks: TransferHooks,
    ) -> TransferResult:
        self._ops.target(target)
        up = direction == "up"
        local = self.roots.resolve(local_path, target=target)
        remote = validate_remote_path(_strip(remote_path), target=target)
        lprobe, tree = await local_probe(local)
        rprobe = await remote_probe(self._ops, target, remote)
        src, dst = (lprobe, rprobe) if up else (rprobe, lprobe)
        src_path, dst_path = (str(local), remote) if up else (remote, str(local))
        src_side: Side = "local" if up else "remote"
        dst_side: Side = "remote" if up else "local"
        if src.kind not in ("file", "dir"):
            reason = "not_found" if src.kind == "none" else "unsupported_type"
            raise (PathNotFound if src.kind == "none" else TransferPathError)(
                f"the source {src_path!r} is {'missing' if src.kind == 'none' else 'not a regular file'}",
                target=target,
                path=src_path,
                side=src_side,
                reason=reason,
            )
        is_tree = src.kind == "dir"
        _check_destination(dst, is_tree, options, target=target, path=dst_path, side=dst_side)
        method = await self._choose(target, options, is_tree, remote)
        if options.verify is not None:
            caps = await self._ops.capabilities(target)
            if not caps.tools.get("sha256sum", False):
                raise MissingCapability(
                    "verify needs sha256sum on the target",
                    target=target,
                    capability="sha256sum",
                    side="remote",
                )
        if not up:
            self._check_free_space(target, local, src.size)
        parents_created = False
        if dst.parent == "none":
            if not options.create_parents:
                raise PathNotFound(
                    "the destination's parent directory does not exist (create_parents creates it)",
                    target=target,
                    path=dst_path,
                    side=dst_side,
                    reason="parent_missing",
                )
            await self._mkdir(target, local.parent if not up else None, split_remote(remote)[0])
            parents_created = True
        evidence = dst.partial_files > 0 and method == "rsync"
        if method == "scp":
            outcome = await self._scp(
                target, local, remote, up=up, options=options, hooks=hooks, total=src.size
            )
            literal, matched, files_done = src.size, 0, 1
        else:
            flags = self._flags(
                tree=is_tree,
                down=not up,
                ignore_existing=options.overwrite != "replace",
                bwlimit=options.bwlimit_kib_s,
            )
            outcome = await self._rsync(
                target, local, remote, up=up, tree=is_tree, flags=flags, total=src.size, hooks=hooks
            )
            literal = outcome.stats.get("literal", 0)
            matched = outcome.stats.get("matched", 0)
            files_done = outcome.stats.get("files_transferred", 0)
        files_verified, digest = 0, None
        if options.verify is not None:
            names = None
            if is_tree:
                if not up:  # what landed locally (extra local files are not compared)
                    tree = (await local_probe(local))[1]
                names = tree.files if tree is not None else {}
            verified = await verify_transfer(
                self._ops,
                target,
                local=local,
                remote=remote,
                names=names,
                destination=dst_side,
                ceiling_s=self._hash_ceiling_s,
                file_size=src.size,
            )
            files_verified, digest = verified.files, verified.digest
        if hooks.progress is not None:
            await hooks.progress(src.size, src.size)
        return TransferResult(
            target=target,
            direction=direction,
            local_path=str(local),
            remote_path=remote,
            kind="tree" if is_tree else "file",
            method=method,
            bytes_transferred=literal,
            bytes_total=src.size,
            files_transferred=files_done,
            files_total=src.files,
            duration_s=round(outcome.duration_s, 3),
            throughput_bytes_s=_rate(literal, outcome),
            resumed=evidence,
            partial_bytes_found=dst.partial_bytes if evidence else 0,
            bytes_skipped=min(matched, dst.partial_bytes) if evidence else 0,
            bytes_matched=matched,
            overwrite=options.overwrite,
            parents_created=parents_created,
            verified=options.verify,
            sha256=digest,
            files_verified=files_verified,
            changes=outcome.changes,
            changes_total=outcome.changes_total,
            changes_truncated=outcome.changes_total > len(outcome.changes),
        )

    # -- pieces ----------------------------------------------------------------------------------------------
    async def _need_rsync(self, target: str) -> None:
        if shutil.which(self._settings.rsync_binary) is None:
            raise MissingCapability(
                "rsync is not installed on the gateway host", target=target, capability="rsync", side="local"
            )
        caps = await self._ops.capabilities(target)
        if not caps.tools.get("rsync", False):
            raise MissingCapability(
                "rsync is not installed on the target", target=target, capability="rsync", side="remote"
            )

    async def _choose(
        self, target: str, options: TransferOptions, is_tree: bool, remote: str
    ) -> Literal["rsync", "scp"]:
        if options.method == "scp" and is_tree:
            raise InvalidRequest(target=target, field="method", reason="scp copies single files only")
        if options.method != "scp":
            try:
                await self._need_rsync(target)
                return "rsync"
            except MissingCapability:
                if options.method == "rsync" or is_tree:
                    raise
        if not set(remote) <= _PLAIN_REMOTE:
            raise MissingCapability(
                "rsync is needed for this remote path (scp would expand or split it)",
                target=target,
                capability="rsync",
                side="remote",
            )
        if shutil.which(self._settings.scp_binary) is None:
            raise MissingCapability(
                "scp is not installed on the gateway host", target=target, capability="scp", side="local"
            )
        return "scp"

    def _check_free_space(self, target: str, local: Path, needed: int) -> None:
        probe = local
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        floor = self._settings.min_free_bytes
        if free - needed < floor:
            raise FreeSpaceFloor(
                f"the download needs {needed} bytes; {free} are free and {floor} must stay free",
                target=target,
                needed_bytes=needed,
                available_bytes=free,
                floor_bytes=floor,
            )

    async def _mkdir(self, target: str, local_parent: Path | None, remote_parent: str) -> None:
        if local_parent is not None:
            await anyio.to_thread.run_sync(lambda: local_parent.mkdir(parents=True, exist_ok=True))
            return
        result = await self._ops.run(target, ["mkdir", "-p", "--", remote_parent])
        if result.exit_code != 0:
            raise TransferPathError(
                f"mkdir -p failed: {result.stderr[-300:]}",
                target=target,
                path=remote_parent,
                side="remote",
                reason="parent_missing",
            )

    def _flags(self, *, tree: bool, down: bool, ignore_existing: bool, bwlimit: int | None) -> list[str]:
        flags = ["-t", "-p"]
        if tree:
            flags += ["-r", "-l"]
            if down:
                flags.append("--safe-links")  # a symlink pointing out of the tree never lands locally
        elif down:
            flags.append("--copy-links")  # a single remote symlink: its content, not the link
        if ignore_existing:
            flags.append("--ignore-existing")
        if bwlimit is not None:
            flags.append(f"--bwlimit={bwlimit}")
        return flags

    @asynccontextmanager
    async def _ssh_words(self, target: str) -> AsyncIterator[tuple[TargetSpec, list[str]]]:
        """Hold a channel slot of the target's master; yield the ssh words (without host and command)."""
        spec = self._ops.target(target)
        identity = await self._ops.identity(target)
        pool = self._ops._ready()[0]
        async with pool.channel(spec, identity) as master:
            if master is None:
                argv = self._args.oneshot(spec, "")
            else:
                argv = self._args.mux_client(spec, master.control_path, "")
            yield spec, ssh_prefix(argv, spec.host, "")

    async def _rsync(
        self,
        target: str,
        local: Path,
        remote: str,
        *,
        up: bool,
        tree: bool,
        flags: list[str],
        total: int,
        hooks: TransferHooks,
    ) -> RunOutcome:
        async with self._ssh_words(target) as (spec, words):
            slash = "/" if tree else ""
            if up:
                src, dst = f"{local}{slash}", remote_arg(spec.host, f"{remote}{slash}")
            else:
                src, dst = remote_arg(spec.host, escape_rsync_source(remote) + slash), f"{local}{slash}"
            argv = [
                self._settings.rsync_binary, "--secluded-args", "-e", rsh_command(words),
                "--partial", f"--partial-dir={PARTIAL_DIR}",
                "--info=progress2", "--no-h", "--outbuf=L", "--stats", "--out-format=%i %n",
                *flags, "--", src, dst,
            ]  # fmt: skip
            outcome = await self._supervised(argv, target, local, remote, up, tree, total, hooks, "rsync")
        if outcome.returncode != 0:
            raise failure(outcome, target=target, stage="rsync", tool="rsync")
        return outcome

    async def _scp(
        self,
        target: str,
        local: Path,
        remote: str,
        *,
        up: bool,
        options: TransferOptions,
        hooks: TransferHooks,
        total: int,
    ) -> RunOutcome:
        async with self._ssh_words(target) as (spec, words):
            limit = ["-l", str(options.bwlimit_kib_s * 8)] if options.bwlimit_kib_s else []
            there = remote_arg(spec.host, remote)
            src, dst = (str(local), there) if up else (there, str(local))
            argv = [self._settings.scp_binary, *scp_options(words), "-q", "-p", *limit, "--", src, dst]
            outcome = await self._supervised(argv, target, local, remote, up, False, total, hooks, "scp")
        if outcome.returncode != 0:
            raise failure(outcome, target=target, stage="scp", tool="scp")
        return outcome

    async def _supervised(
        self,
        argv: list[str],
        target: str,
        local: Path,
        remote: str,
        up: bool,
        tree: bool,
        total: int,
        hooks: TransferHooks,
        stage: str,
    ) -> RunOutcome:
        try:
            return await run_tool(
                argv,
                target=target,
                stage=stage,
                max_changes=self._settings.max_changes,
                progress=hooks.progress,
                total=total,
                every_s=self._settings.progress_interval_s,
            )
        except anyio.get_cancelled_exc_class():
            # every process of the run is gone here (its group was terminated and reaped); say what is left
            if hooks.cancelled is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_LEFTOVER_S):
                    hooks.cancelled(await self._leftover(target, local, remote, up, tree))
            raise

    async def _leftover(self, target: str, local: Path, remote: str, up: bool, tree: bool) -> Leftover:
        where = remote if up else str(local)
        try:
            probe = await remote_probe(self._ops, target, remote) if up else (await local_probe(local))[0]
        except Exception as exc:  # a report, not a second failure: the caller is already cancelled
            return Leftover(
                destination=where,
                destination_exists=None,
                partial_dir=PARTIAL_DIR,
                partial_files=None,
                partial_bytes=None,
                resumable=False,
                note=f"could not inspect the destination ({type(exc).__name__})",
            )
        resumable = probe.partial_files > 0
        note = (
            f"{probe.partial_bytes} bytes kept in {PARTIAL_DIR}; the same call resumes from there"
            if resumable
            else "no partial data found at the destination"
        )
        if tree:
            note += "; files completed before the cancel are in place"
        return Leftover(
            destination=where,
            destination_exists=probe.kind != "none",
            partial_dir=PARTIAL_DIR,
            partial_files=probe.partial_files,
            partial_bytes=probe.partial_bytes,
            resumable=resumable,
            note=note,
        )


def _strip(path: str) -> str:
    stripped = path.rstrip("/")
    return stripped or ("/" if path.startswith("/") else path)


def _rate(done: int, outcome: RunOutcome) -> float:
    return round(done / outcome.duration_s, 1) if outcome.duration_s > 0 else 0.0


def _check_destination(
    dst: Probe, is_tree: bool, options: TransferOptions, *, target: str, path: str, side: Side
) -> None:
    if dst.kind == "none":
        return
    if not is_tree and dst.kind == "dir":
        raise TransferPathError(
            "the destination is a directory; name the file to create",
            target=target,
            path=path,
            side=side,
            reason="is_a_directory",
        )
    if is_tree and dst.kind != "dir":
        raise TransferPathError(
            "the destination exists and is not a directory",
            target=target,
            path=path,
            side=side,
            reason="not_a_directory",
        )
    if options.overwrite == "fail":
        raise DestinationExists(
            "the destination exists (overwrite: replace or skip)", target=target, path=path, side=side
        )
