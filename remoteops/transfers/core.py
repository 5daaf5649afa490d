"""The machinery under :class:`remoteops.Transfers`: choosing rsync or scp, building their command lines
from the ssh options exec uses, running them supervised, and saying what a cancelled run left behind."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio

from remoteops._capabilities import rsync_version
from remoteops._errors import InvalidRequest
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.ssh.args import SshArgs
from remoteops.transfers.errors import (
    FreeSpaceFloor,
    TransferCapabilityMissing,
    TransferFailed,
    TransferPathError,
)
from remoteops.transfers.models import (
    PARTIAL_DIR,
    Leftover,
    TransferHooks,
    TransferOptions,
    TransferSettings,
)
from remoteops.transfers.paths import (
    LocalRoots,
    escape_glob,
    remote_arg,
    rsh_command,
    scp_options,
    ssh_prefix,
)
from remoteops.transfers.probe import LocalTree, Probe, local_probe, remote_probe
from remoteops.transfers.run import RunOutcome, failure, run_tool

if TYPE_CHECKING:
    from remoteops._runner import Runner

__all__ = ["TransferCore", "rate", "strip_slashes"]

_NS_MTIMES = (3, 1, 3)  # the first rsync whose receiver compares nanoseconds (--modify-window=-1)
_PLAIN_REMOTE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+@,=%-")
_LEFTOVER_S = 10.0


class TransferCore:
    """Shared pieces of upload, download and sync (see :class:`remoteops.Transfers`)."""

    def __init__(self, ops: Runner, transport: TransportSettings, settings: TransferSettings) -> None:
        """``transport`` must be the settings ``ops`` was made with (rsync/scp get the same ssh options)."""
        self._ops = ops
        self._settings = settings
        self._hash_ceiling_s = transport.exec_timeout_max_s
        self.roots = LocalRoots(settings.local_roots)
        self._args = SshArgs(transport)
        self._local_rsync: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.roots)

    async def _probes(
        self, target: str, local: Path, remote: str, partial_name: str | None
    ) -> tuple[Probe, LocalTree | None, Probe]:
        """Both ends at once: the local walk runs while the remote probe is on the wire."""
        local_found: list[tuple[Probe, LocalTree | None]] = []
        failed: list[Exception] = []  # raised as itself below, never wrapped in an exception group

        async def local_side() -> None:
            try:
                local_found.append(await local_probe(local))
            except Exception as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(local_side)
            try:
                rprobe = await remote_probe(self._ops, target, remote, partial_name)
            except Exception as exc:
                failed.append(exc)
        if failed:
            raise failed[0]
        lprobe, tree = local_found[0]
        return lprobe, tree, rprobe

    async def _need_rsync(self, target: str) -> None:
        if shutil.which(self._settings.rsync_binary) is None:
            raise TransferCapabilityMissing(
                "rsync is not installed on the gateway host", target=target, capability="rsync", side="local"
            )
        caps = await self._ops.capabilities(target)
        if not caps.tools.get("rsync", False):
            raise TransferCapabilityMissing(
                "rsync is not installed on the target", target=target, capability="rsync", side="remote"
            )

    async def _ns_mtimes(self, target: str, *, up: bool) -> bool:
        """Whether the receiving rsync compares modification times to the nanosecond (3.1.3 and later)."""
        if up:
            version = (await self._ops.capabilities(target)).rsync_version
        else:
            if self._local_rsync is None:
                with anyio.fail_after(10):
                    done = await anyio.run_process(
                        [self._settings.rsync_binary, "--version"], check=False, stderr=subprocess.DEVNULL
                    )
                self._local_rsync = rsync_version(done.stdout.decode("utf-8", "replace")) or ""
            version = self._local_rsync
        if not version:
            return False
        return tuple(int(part) for part in version.split(".")) >= _NS_MTIMES

    async def _choose(
        self, target: str, options: TransferOptions, is_tree: bool, remote: str
    ) -> Literal["rsync", "scp"]:
        if options.method == "scp" and is_tree:
            raise InvalidRequest(target=target, field="method", reason="scp copies single files only")
        if options.method != "scp":
            try:
                await self._need_rsync(target)
                return "rsync"
            except TransferCapabilityMissing:
                if options.method == "rsync" or is_tree:
                    raise
        if not set(remote) <= _PLAIN_REMOTE:
            raise TransferCapabilityMissing(
                "rsync is needed for this remote path (scp would expand or split it)",
                target=target,
                capability="rsync",
                side="remote",
            )
        if shutil.which(self._settings.scp_binary) is None:
            raise TransferCapabilityMissing(
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

    async def _rename(self, target: str, staged: str, final: str) -> None:
        result = await self._ops.run(target, ["mv", "-f", "--", staged, final])
        if result.exit_code != 0:
            raise TransferFailed(
                f"could not rename {staged!r} to its name: {result.stderr[-300:]}",
                target=target,
                stage="rename",
                exit_code=result.exit_code,
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

    def _flags(
        self, *, tree: bool, down: bool, ignore_existing: bool, bwlimit: int | None, ns_mtimes: bool
    ) -> list[str]:
        flags = ["-t", "-p", "--sparse"]  # holes stay holes: a sparse file arrives no bigger on disk
        if ns_mtimes:
            # the quick check compares modification times to the nanosecond, so a file rewritten with the same
            # size within one second is not taken for unchanged (an older receiver does not know "-@-1")
            flags.append("--modify-window=-1")
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
        async with self._ops.master_channel(spec, identity) as master:
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
        partial_name: str | None = None,
    ) -> RunOutcome:
        async with self._ssh_words(target) as (spec, words):
            slash = "/" if tree else ""
            there = remote_arg(spec.host, escape_glob(remote) + slash)
            src, dst = (f"{local}{slash}", there) if up else (there, f"{local}{slash}")
            argv = [
                self._settings.rsync_binary, "--secluded-args", "-e", rsh_command(words),
                "--partial", f"--partial-dir={PARTIAL_DIR}",
                "--info=progress2", "--no-h", "--outbuf=L", "--stats", "--out-format=%i %n",
                *flags, "--", src, dst,
            ]  # fmt: skip
            outcome = await self._supervised(
                argv, target, local, remote, up, tree, total, hooks, partial_name
            )
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
            outcome = await self._supervised(argv, target, local, remote, up, False, total, hooks)
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
        partial_name: str | None = None,
    ) -> RunOutcome:
        try:
            return await run_tool(
                argv,
                max_changes=self._settings.max_changes,
                progress=hooks.progress,
                total=total,
                every_s=self._settings.progress_interval_s,
            )
        except anyio.get_cancelled_exc_class():
            # every process of the run is gone here (its group was terminated and reaped); say what is left
            if hooks.cancelled is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_LEFTOVER_S):
                    hooks.cancelled(await self._leftover(target, local, remote, up, tree, partial_name))
            raise

    async def _leftover(
        self, target: str, local: Path, remote: str, up: bool, tree: bool, partial_name: str | None
    ) -> Leftover:
        where = remote if up else str(local)
        try:
            if up:
                probe = await remote_probe(self._ops, target, remote, partial_name)
            else:
                probe = (await local_probe(local))[0]
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


def strip_slashes(path: str) -> str:
    stripped = path.rstrip("/")
    return stripped or ("/" if path.startswith("/") else path)


def rate(done: int, outcome: RunOutcome) -> float:
    return round(done / outcome.duration_s, 1) if outcome.duration_s > 0 else 0.0
