"""Transfers against the real OpenSSH sshd and real rsync: awkward names, resume on evidence, cancellation
that leaves no process behind (verification, sync and policy: ``test_transfer_checks.py``).

The shared pieces at the top (awkward trees, snapshots, process-table checks that find what a transfer
started by its pid/pgid, never by name alone) are used by the gateway tests too.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from remoteops import (
    Leftover,
    RemoteOps,
    TransferHooks,
    TransferOptions,
    Transfers,
    TransferSettings,
    TransportSettings,
)
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.conftest import OpsFactory

AWKWARD = [
    "with space",
    "new\nline",
    "ünïcødé ✓ 名前",
    "-leading-dash",
    "glob[1]*?",
    "back\\slash",
    "  lead and trail  ",
    "tab\tname",
    "quote'\"s",
    "$(touch rog-pwned)",
    ";semi&amp|pipe",
]


def make_tree(root: Path) -> dict[str, bytes]:
    """Files with awkward names at the top and in an awkwardly named subdirectory; returns path → bytes."""
    root.mkdir(parents=True, exist_ok=True)
    content: dict[str, bytes] = {}
    sub = "dir with\nnewline [x]"
    (root / sub).mkdir()
    for index, name in enumerate(AWKWARD):
        for rel in (name, f"{sub}/{name}"):
            data = os.urandom(500 + index * 37) + rel.encode()
            (root / rel).write_bytes(data)
            content[rel] = data
    return content


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under root: relative path → (bytes, mtime_ns); partial dirs left out."""
    out: dict[str, tuple[bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".rog-partial"]
        for name in filenames:
            path = Path(dirpath, name)
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie cannot run any more)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def group_members(pgid: int) -> set[int]:
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[2] == pgid and st[0] not in ("Z", "X"):
                members.add(int(entry.name))
    return members


def pids_with_arg(marker: str) -> set[int]:
    """Processes whose argv holds ``marker`` (a unique path of this test)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in arg for arg in argv):
            found.add(int(entry.name))
    return found


def descendants(root_pid: int, comm: str) -> set[int]:
    """Running processes named ``comm`` below ``root_pid`` (e.g. the rsync servers of our test sshd)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        children.setdefault(st[1], []).append(pid)
        try:
            names[pid] = (entry / "comm").read_text().strip()
        except OSError:
            continue
    found, todo = set(), [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if names.get(child) == comm:
                found.add(child)
    return found


async def wait_until_gone(root_pid: int, comm: str, ceiling_s: float = 15.0) -> None:
    """Bounded wait for the far side's processes to exit (no event exists for another process's exit)."""
    with anyio.fail_after(ceiling_s):
        while descendants(root_pid, comm):  # noqa: ASYNC110 - polling the process table, bounded above
            await anyio.sleep(0.05)


# -- fixtures ------------------------------------------------------------------------------------------------


@dataclass
class Env:
    ops: RemoteOps
    tr: Transfers
    local: Path  # the local root
    remote: Path  # a directory the target user writes to (the target is this machine)
    settings: TransportSettings


@asynccontextmanager
async def transfer_env(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, shared_dir: Path
) -> AsyncIterator[Env]:
    """RemoteOps over the test sshd and Transfers with a local root in ``tmp_path`` (used by both modules)."""
    local = tmp_path / "local"
    local.mkdir()
    async with ops_factory() as ops:
        tr = Transfers(ops, settings, TransferSettings(local_roots=(local,), min_free_bytes=0))
        yield Env(ops, tr, local, shared_dir, settings)


@pytest.fixture
async def env(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, shared_dir: Path
) -> AsyncIterator[Env]:
    async with transfer_env(ops_factory, settings, tmp_path, shared_dir) as made:
        yield made


def _exists(path: Path) -> bool:
    return path.exists()


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {name: data for name, (data, _) in snapshot(root).items()}


NONE = TransferHooks()
PWNED = Path("/root/rog-pwned")
VERIFY = TransferOptions(verify="sha256")
REPLACE_VERIFY = TransferOptions(overwrite="replace", verify="sha256")

# -- awkward names -------------------------------------------------------------------------------------------


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_tree_with_awkward_names_round_trips_byte_exact(env: Env) -> None:
    content = make_tree(env.local / "src")
    up = await env.tr.upload("root", "src", str(env.remote / "tree"), VERIFY, NONE)
    assert (up.kind, up.method, up.verified, up.resumed) == ("tree", "rsync", "sha256", False)
    assert up.files_total == up.files_verified == len(content)
    assert up.bytes_transferred == up.bytes_total == sum(len(v) for v in content.values())
    assert tree_bytes(env.remote / "tree") == content  # byte-exact on the target
    down = await env.tr.download("root", "back", str(env.remote / "tree"), VERIFY, NONE)
    assert down.files_verified == len(content)
    assert down.sha256 == up.sha256  # the same manifest on both ends
    assert tree_bytes(env.local / "back") == content
    assert not _exists(PWNED)  # "$(touch rog-pwned)" stayed a name


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_single_files_with_awkward_names_round_trip_without_remote_globbing(env: Env) -> None:
    """A download source is a wildcard pattern to the remote rsync: 'glob[1]*?' must not fetch 'glob1x'."""
    (env.remote / "glob1x").write_bytes(b"decoy")
    (env.local / "up").mkdir()
    for index, name in enumerate(AWKWARD):
        data = os.urandom(300) + name.encode()
        (env.local / "up" / name).write_bytes(data)
        up = await env.tr.upload("root", f"up/{name}", str(env.remote / name), VERIFY, NONE)
        assert (up.kind, up.bytes_transferred) == ("file", len(data))
        assert (env.remote / name).read_bytes() == data
        down = await env.tr.download("root", f"down-{index}", str(env.remote / name), VERIFY, NONE)
        assert down.sha256 == up.sha256
        assert (env.local / f"down-{index}").read_bytes() == data


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_sparse_file_stays_sparse_through_download_and_upload(env: Env) -> None:
    size = 64 * 1024 * 1024
    source = env.remote / "sparse.img"
    with source.open("wb") as f:  # 64 MiB with 4 KiB of data at each end, a hole between
        f.write(b"head" * 1024)
        f.seek(size - 4096)
        f.write(b"tail" * 1024)
    assert source.stat().st_blocks * 512 < 1024 * 1024  # the file system keeps holes
    down = await env.tr.download("root", "sparse.img", str(source), VERIFY, NONE)
    local = env.local / "sparse.img"
    assert (down.method, local.stat().st_size) == ("rsync", size)
    assert local.stat().st_blocks * 512 < 1024 * 1024  # not 64 MiB allocated
    up = await env.tr.upload("root", "sparse.img", str(env.remote / "again.img"), VERIFY, NONE)
    assert up.sha256 == down.sha256
    assert (env.remote / "again.img").stat().st_blocks * 512 < 1024 * 1024


# -- resume on evidence --------------------------------------------------------------------------------------

SIZE = 24 * 1024 * 1024
SLACK = 256 * 1024  # rsync matches whole blocks: a resume may resend up to one block more


async def _interrupt(env: Env, direction: str, local: str, remote: Path) -> list[Leftover]:
    """Start a throttled transfer and cancel it once progress shows at least 2 MiB moved."""
    left: list[Leftover] = []
    with anyio.fail_after(60), anyio.CancelScope() as scope:

        async def progress(done: int, total: int | None) -> None:
            if done >= 2 * 1024 * 1024:
                scope.cancel()

        hooks = TransferHooks(progress=progress, cancelled=left.append)
        call = env.tr.upload if direction == "up" else env.tr.download
        await call("root", local, str(remote), TransferOptions(bwlimit_kib_s=4096), hooks)
    assert scope.cancelled_caught
    return left


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_download_killed_half_way_resumes_moving_only_the_rest(env: Env) -> None:
    data = os.urandom(SIZE)
    (env.remote / "big.bin").write_bytes(data)
    left = await _interrupt(env, "down", "big.bin", env.remote / "big.bin")
    partial = env.local / ".rog-partial" / "big.bin"
    kept = partial.stat().st_size
    assert 0 < kept < SIZE
    assert not (env.local / "big.bin").exists()  # nothing claims to be the finished file
    assert left
    assert left[0].resumable
    assert left[0].partial_bytes == kept
    resumed = await env.tr.download("root", "big.bin", str(env.remote / "big.bin"), VERIFY, NONE)
    assert resumed.resumed is True
    assert resumed.partial_bytes_found == kept
    assert resumed.bytes_transferred <= SIZE - kept + SLACK
    assert resumed.bytes_skipped >= kept - SLACK
    assert (env.local / "big.bin").read_bytes() == data
    assert not partial.exists()
    fresh = await env.tr.download("root", "again.bin", str(env.remote / "big.bin"), TransferOptions(), NONE)
    assert (fresh.resumed, fresh.bytes_skipped, fresh.bytes_transferred) == (False, 0, SIZE)


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_cancelled_upload_leaves_no_rsync_or_ssh_process_and_resumes_later(
    env: Env, sshd: SshdInstance
) -> None:
    data = os.urandom(SIZE)
    source = env.local / "big-upload.bin"  # its path is in rsync's argv: how we find what we started
    source.write_bytes(data)
    started: set[int] = set()

    left: list[Leftover] = []
    with anyio.fail_after(60), anyio.CancelScope() as scope:

        async def progress(done: int, total: int | None) -> None:
            for pid in pids_with_arg(str(source)):
                started.update(group_members(pid) | {pid})
            if done >= 2 * 1024 * 1024 and started:
                scope.cancel()

        hooks = TransferHooks(progress=progress, cancelled=left.append)
        await env.tr.upload(
            "root", source.name, str(env.remote / "big.bin"), TransferOptions(bwlimit_kib_s=4096), hooks
        )
    assert scope.cancelled_caught
    assert started, "the transfer's processes were seen while it ran"
    assert not [pid for pid in started if running(pid)], "still running after the cancel"
    assert left
    assert left[0].destination == str(env.remote / "big.bin")
    await wait_until_gone(sshd.pid, "rsync")  # the target's rsync server ends when its channel closes
    partial = env.remote / ".rog-partial" / "big.bin"
    kept = partial.stat().st_size
    assert 0 < kept < SIZE
    resumed = await env.tr.upload("root", source.name, str(env.remote / "big.bin"), VERIFY, NONE)
    assert (resumed.resumed, resumed.partial_bytes_found) == (True, kept)
    assert resumed.bytes_transferred <= SIZE - kept + SLACK
    assert (env.remote / "big.bin").read_bytes() == data


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_cancelled_scp_transfer_leaves_no_scp_or_ssh_process(env: Env) -> None:
    source = env.local / "scp-cancel.bin"
    source.write_bytes(os.urandom(8 * 1024 * 1024))
    started: set[int] = set()
    seen = anyio.Event()
    left: list[Leftover] = []

    async def watch() -> None:  # scp reports no progress: sample the process table until scp and its ssh
        while len(started) < 2:  # show up (scp is seen before it forked ssh; bounded by the fail_after below)
            for pid in pids_with_arg(str(source)):
                started.update(group_members(pid) | {pid})
            await anyio.sleep(0.02)
        seen.set()

    options = TransferOptions(method="scp", bwlimit_kib_s=512)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)

            async def copy() -> None:
                await env.tr.upload(
                    "root",
                    source.name,
                    str(env.remote / "s.bin"),
                    options,
                    TransferHooks(cancelled=left.append),
                )

            tg.start_soon(copy)
            await seen.wait()
            tg.cancel_scope.cancel()
    assert len(started) >= 2  # scp and the ssh it started, one process group
    assert not [pid for pid in started if running(pid)], "still running after the cancel"
    assert left
    assert left[0].resumable is False  # scp keeps no partial data to resume from


# -- a source that changes under the copy ------------------------------------------------------------------


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_download_of_a_file_that_grew_after_the_probe_reports_no_more_moved_than_it_held(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file grows between the transfer's probe of the source and the copy itself (a log being written).
    source = env.remote / "growing.log"
    source.write_bytes(b"x" * 100_000)
    probes = env.tr._probes

    async def probe_then_grow(*args: object, **kwargs: object) -> object:
        found = await probes(*args, **kwargs)  # type: ignore[arg-type]
        with source.open("ab") as handle:
            handle.write(b"y" * 400_000)
        return found

    monkeypatch.setattr(env.tr, "_probes", probe_then_grow)
    down = await env.tr.download("root", "grown.log", str(source), TransferOptions(), NONE)
    assert (env.local / "grown.log").read_bytes() == source.read_bytes()
    assert down.bytes_transferred == 500_000
    assert down.bytes_total >= down.bytes_transferred
