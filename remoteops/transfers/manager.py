"""Transfers between the gateway host and targets: ``upload``, ``download`` and ``sync``.

The bytes never pass through Python: native ``rsync`` (or ``scp`` for a plain single file when rsync is
missing) moves them over the target's ControlMaster, with ssh options built by the same ``SshArgs`` exec
uses (``-F``, BatchMode, ConnectTimeout, host-key policy, ``ProxyCommand=false`` against a silent direct
fallback). One channel slot of the target is held for the whole transfer.

Resume is on evidence: rsync keeps interrupted files in ``.rog-partial`` next to the destination and reuses
them; ``resumed`` is reported only when such a partial file was found *before* the transfer started.
"""

from __future__ import annotations

from remoteops._errors import InvalidRequest
from remoteops.transfers.core import TransferCore, rate, strip_slashes
from remoteops.transfers.errors import (
    DestinationExists,
    PathNotFound,
    Side,
    TransferCapabilityMissing,
    TransferPathError,
)
from remoteops.transfers.models import (
    Direction,
    SyncOptions,
    SyncResult,
    TransferHooks,
    TransferOptions,
    TransferResult,
)
from remoteops.transfers.paths import (
    has_glob,
    staged_name,
    validate_remote_path,
)
from remoteops.transfers.probe import Probe, local_probe, remote_name, remote_probe, split_remote
from remoteops.transfers.run import RunOutcome
from remoteops.transfers.verify import verify_transfer

__all__ = ["Transfers"]

_MAX_EXCLUDES = 100


class Transfers(TransferCore):
    """Transfers over a :class:`RemoteOps` (which must be entered). ``enabled`` is False without roots."""

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
        remote = validate_remote_path(strip_slashes(remote_path), target=target)
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
        if up and dst.kind == "none" and has_glob(remote_name(remote)) and not options.dry_run:
            await self._mkdir(target, None, remote)  # every wildcard component must exist (escape_glob)
        extra = [f"--exclude={p}" for p in options.excludes]
        if options.delete:
            extra.append("--delete")
        if options.dry_run:
            extra.append("--dry-run")
        flags = self._flags(
            tree=True,
            down=not up,
            ignore_existing=False,
            bwlimit=options.bwlimit_kib_s,
            ns_mtimes=await self._ns_mtimes(target, up=up),
        )
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
            throughput_bytes_s=rate(0 if options.dry_run else outcome.stats.get("literal", 0), outcome),
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
        remote = validate_remote_path(strip_slashes(remote_path), target=target)
        # a new remote file named like a wildcard pattern is written under a stable plain name, then renamed
        staged = staged_name(remote) if up and has_glob(remote_name(remote)) else None
        partial_name = remote_name(staged) if staged is not None else None
        lprobe, tree, rprobe = await self._probes(target, local, remote, partial_name)
        if lprobe.kind != "file":
            staged = partial_name = None  # a tree's own directory is created first instead
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
                raise TransferCapabilityMissing(
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
        if up and is_tree and dst.kind == "none" and has_glob(remote_name(remote)):
            await self._mkdir(target, None, remote)  # every wildcard component must exist (escape_glob)
        evidence = dst.partial_files > 0 and method == "rsync"
        literal = matched = files_done = 0
        if not is_tree and dst.kind == "file" and options.overwrite == "skip":
            outcome = RunOutcome(returncode=0)  # the one file exists: nothing to move
            evidence = False
        elif method == "scp":
            outcome = await self._scp(
                target, local, remote, up=up, options=options, hooks=hooks, total=src.size
            )
            literal, files_done = src.size, 1
        else:
            flags = self._flags(
                tree=is_tree,
                down=not up,
                ignore_existing=options.overwrite != "replace" and staged is None,
                bwlimit=options.bwlimit_kib_s,
                ns_mtimes=await self._ns_mtimes(target, up=up),
            )
            outcome = await self._rsync(
                target,
                local,
                staged or remote,
                up=up,
                tree=is_tree,
                flags=flags,
                total=src.size,
                hooks=hooks,
                partial_name=partial_name,
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
                remote=staged or remote,
                names=names,
                destination=dst_side,
                ceiling_s=self._hash_ceiling_s,
                file_size=src.size,
            )
            files_verified, digest = verified.files, verified.digest
        if staged is not None and outcome.stats:
            await self._rename(target, staged, remote)
        # What the source held when the copy ran (rsync's file list), not at the earlier probe: a source that
        # grew in between must not report more bytes moved than it held.
        total = max(outcome.stats.get("total_size", src.size), literal)
        if hooks.progress is not None:
            await hooks.progress(total, total)
        return TransferResult(
            target=target,
            direction=direction,
            local_path=str(local),
            remote_path=remote,
            kind="tree" if is_tree else "file",
            method=method,
            bytes_transferred=literal,
            bytes_total=total,
            files_transferred=files_done,
            files_total=src.files,
            duration_s=round(outcome.duration_s, 3),
            throughput_bytes_s=rate(literal, outcome),
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
