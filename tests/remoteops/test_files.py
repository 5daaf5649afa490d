"""``ops.files`` against both real peers (the throwaway OpenSSH sshd, the embedded asyncssh target).

The target is this machine, so the tests check the files directly on the local filesystem.
"""

from __future__ import annotations

import contextlib
import ctypes
import grp
import hashlib
import os
import pwd
import random
import signal
import struct
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoteops import (
    FileAccessDenied,
    FileConflict,
    FileInfo,
    FileNotFound,
    Hunk,
    InvalidRequest,
    MissingCapability,
    ProtectedPath,
    RemoteOps,
    TargetSpec,
    TransportLost,
    TransportSettings,
)
from remoteops.embedded.target import EmbeddedTarget
from tests.fixtures.profiles import examples
from tests.fixtures.sshd import SshdInstance

pytestmark = pytest.mark.anyio


@dataclass
class Peer:
    kind: str
    name: str
    settings: TransportSettings
    targets: list[TargetSpec]

    def ops(self, **overrides: Any) -> RemoteOps:
        settings = TransportSettings.model_validate({**self.settings.model_dump(), **overrides})
        return RemoteOps(settings, self.targets)


@pytest.fixture(params=[pytest.param("sshd", marks=pytest.mark.sshd), "embedded"])
async def peer(request: pytest.FixtureRequest, shared_dir: Path) -> AsyncIterator[Peer]:
    if request.param == "sshd":
        sshd = request.getfixturevalue("sshd")
        settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
        yield Peer("sshd", "plain", settings, [TargetSpec(name="plain", host=sshd.alias("plain"))])
        return
    async with EmbeddedTarget(shared_dir / "emb") as target:
        settings = TransportSettings(ssh_config_file=target.ssh_config_path, control_dir=shared_dir / "c")
        yield Peer("embedded", "demo", settings, [TargetSpec(name="demo", host=target.alias)])


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_write_then_read_stat_and_list_report_content_sha256_and_metadata(
    peer: Peer, shared_dir: Path
) -> None:
    work = shared_dir / "w"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    content = "line 1\nünïcode ☃\n".encode() * 100
    async with peer.ops() as ops:
        wrote = await ops.files.write(peer.name, str(work / "a.conf"), content, mode=0o640)
        info = await ops.files.stat(peer.name, str(work / "a.conf"), sha256=True)
        whole = await ops.files.read(peer.name, str(work / "a.conf"), max_bytes=1 << 20)
        capped = await ops.files.read(peer.name, str(work / "a.conf"), max_bytes=100, offset=7)
        listing = await ops.files.list(peer.name, str(work))
    assert (wrote.sha256, wrote.size, wrote.created) == (sha(content), len(content), True)
    assert (info.type, info.size, info.mode, info.sha256) == ("file", len(content), "0640", sha(content))
    assert info.uid == (work / "a.conf").stat().st_uid
    assert (whole.content, whole.sha256, whole.truncated, whole.remaining) == (
        content,
        sha(content),
        False,
        0,
    )
    assert (capped.content, capped.truncated, capped.remaining) == (
        content[7:107],
        True,
        len(content) - 107,
    )
    assert [e.path for e in listing.entries] == ["a.conf"]


async def test_expected_sha256_and_if_exists_fail_are_conflicts_that_change_nothing(
    peer: Peer, shared_dir: Path
) -> None:
    path = shared_dir / "c.txt"
    async with peer.ops() as ops:
        first = await ops.files.write(peer.name, str(path), b"one")
        with pytest.raises(FileConflict) as stale:
            await ops.files.write(peer.name, str(path), b"two", expected_sha256=sha(b"other"))
        with pytest.raises(FileConflict) as exists:
            await ops.files.write(peer.name, str(path), b"two", if_exists="fail")
        assert path.read_bytes() == b"one"
        second = await ops.files.write(peer.name, str(path), b"two", expected_sha256=first.sha256)
        with pytest.raises(FileNotFound):
            await ops.files.stat(peer.name, str(shared_dir / "missing"))
    assert (stale.value.reason, stale.value.current_sha256) == ("sha256_mismatch", sha(b"one"))
    assert exists.value.reason == "exists"
    assert (second.sha256, second.created, path.read_bytes()) == (sha(b"two"), False, b"two")


async def test_move_refuses_an_existing_destination_unless_asked_and_delete_needs_recursive(
    peer: Peer, shared_dir: Path
) -> None:
    (shared_dir / "a").write_bytes(b"a")
    (shared_dir / "b").write_bytes(b"b")
    async with peer.ops() as ops:
        with pytest.raises(FileConflict):
            await ops.files.move(peer.name, str(shared_dir / "a"), str(shared_dir / "b"))
        await ops.files.move(peer.name, str(shared_dir / "a"), str(shared_dir / "b"), overwrite=True)
        made = await ops.files.mkdir(peer.name, str(shared_dir / "d" / "e"), parents=True)
        again = await ops.files.mkdir(peer.name, str(shared_dir / "d" / "e"), parents=True)
        with pytest.raises(FileConflict):
            await ops.files.mkdir(peer.name, str(shared_dir / "d"))
        await ops.files.delete(peer.name, str(shared_dir / "d"), recursive=True)
    assert (shared_dir / "b").read_bytes() == b"a"
    assert not (shared_dir / "a").exists()
    assert (made.created, again.created) == (True, False)
    assert not (shared_dir / "d").exists()


@pytest.mark.sshd
async def test_a_root_owned_0600_file_read_as_the_plain_user_is_access_denied(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    secret = shared_dir / "root-only"
    secret.write_bytes(b"root")
    os.chown(secret, 0, 0)
    secret.chmod(0o600)
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    async with RemoteOps(settings, [TargetSpec(name="plain", host=sshd.alias("plain"))]) as ops:
        with pytest.raises(FileAccessDenied) as denied:
            await ops.files.read("plain", str(secret), max_bytes=1024)
        with pytest.raises(FileAccessDenied):
            await ops.files.write("plain", str(secret), b"overwritten")
    assert denied.value.errno == "EACCES"
    assert secret.read_bytes() == b"root"


@pytest.mark.sshd
async def test_stat_with_sha256_of_a_file_the_user_cannot_read_gives_its_metadata_and_says_why_no_hash(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    secret = shared_dir / "root-only"
    secret.write_bytes(b"root secret")
    os.chown(secret, 0, 0)
    secret.chmod(0o600)
    (shared_dir / "readable").write_bytes(b"open")
    (shared_dir / "link").symlink_to(secret)
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    async with RemoteOps(settings, [TargetSpec(name="plain", host=sshd.alias("plain"))]) as ops:
        info = await ops.files.stat("plain", str(secret), sha256=True)
        through = await ops.files.stat("plain", str(shared_dir / "link"), sha256=True, follow=True)
        readable = await ops.files.stat("plain", str(shared_dir / "readable"), sha256=True)
        directory = await ops.files.stat("plain", str(shared_dir), sha256=True)
        plain = await ops.files.stat("plain", str(secret))
    assert (info.type, info.size, info.mode, info.uid, info.owner) == ("file", 11, "0600", 0, "root")
    assert (info.sha256, info.sha256_error) == (None, "permission_denied")
    assert (through.type, through.sha256, through.sha256_error) == ("file", None, "permission_denied")
    assert (readable.sha256, readable.sha256_error) == (sha(b"open"), None)
    assert (directory.sha256, directory.sha256_error) == (None, "not_a_regular_file")
    assert (plain.sha256, plain.sha256_error) == (None, None)  # not asked: no reason either


@pytest.mark.sshd
async def test_delete_of_the_home_directory_and_of_root_is_refused(sshd: SshdInstance) -> None:
    home = Path("/home") / sshd.users["plain"]
    before = sorted(os.listdir(home))
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    targets = [TargetSpec(name="plain", host=sshd.alias("plain"), protected_paths=("/etc",))]
    async with RemoteOps(settings, targets) as ops:
        with pytest.raises(ProtectedPath) as home_refused:
            await ops.files.delete("plain", str(home), recursive=True)
        with pytest.raises(ProtectedPath) as home_slash:
            await ops.files.delete("plain", str(home) + "/./", recursive=True)
        with pytest.raises(ProtectedPath) as root_refused:
            await ops.files.delete("plain", "/", recursive=True)
        with pytest.raises(ProtectedPath) as protected:
            await ops.files.delete("plain", "/etc/hostname", protected=targets[0].protected_paths)
    assert [e.value.reason for e in (home_refused, home_slash, root_refused)] == ["home", "home", "root"]
    assert protected.value.reason == "protected"
    assert sorted(os.listdir(home)) == before


@pytest.mark.sshd
async def test_a_target_without_python3_or_with_the_ssh_carrier_is_missing_capability(
    sshd: SshdInstance,
) -> None:
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    targets = [
        TargetSpec(name="nopy", host=sshd.alias("nopy")),
        TargetSpec(name="sshonly", host=sshd.alias("plain"), carrier="ssh"),
    ]
    async with RemoteOps(settings, targets) as ops:
        with pytest.raises(MissingCapability) as nopy:
            await ops.files.stat("nopy", "/")
        with pytest.raises(MissingCapability) as sshonly:
            await ops.files.stat("sshonly", "/")
    assert "python" in nopy.value.capability
    assert sshonly.value.capability == "agent (carrier = ssh)"


_names = st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b)
_names = _names.filter(lambda b: b not in (b".", b".."))


@pytest.mark.sshd
@pytest.mark.slow
@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=_names,
    content=st.one_of(st.binary(max_size=5000), st.text(max_size=2000).map(lambda t: t.encode())),
)
def test_any_path_bytes_and_content_round_trip_write_stat_read_move_delete(
    portal_ops: tuple[BlockingPortal, RemoteOps], shared_dir: Path, name: bytes, content: bytes
) -> None:
    portal, ops = portal_ops
    base = os.fsencode(shared_dir)
    path, moved = base + b"/" + name, base + b"/m-" + name

    async def scenario() -> None:
        with anyio.fail_after(30):
            wrote = await ops.files.write("plain", path, content)
            info = await ops.files.stat("plain", path, sha256=True)
            got = await ops.files.read("plain", path, max_bytes=1 << 20)
            await ops.files.move("plain", path, moved)
            listing = await ops.files.list("plain", base, hidden=True)
            await ops.files.delete("plain", moved)
            assert (wrote.sha256, info.sha256, got.sha256) == (sha(content),) * 3
            assert (info.size, got.content) == (len(content), content)
            exact = {e.path_b64 or e.path for e in listing.entries}
            shown = (b"m-" + name).decode("utf-8", "replace")
            assert shown in exact or any(e.path == shown for e in listing.entries)

    portal.call(scenario)
    assert not os.path.lexists(path)
    assert not os.path.lexists(moved)


async def stat_after_a_kill(ops: RemoteOps, target: str, path: Path) -> FileInfo:
    """``stat`` with the SHA-256, by the next agent. A kill that came after the write had ended is only
    seen when the dead agent's session closes: a request sent before that is lost (``TransportLost``,
    after which a fresh agent answers), so it is asked again, a bounded number of times."""
    with anyio.fail_after(30):
        for _attempt in range(3):
            with contextlib.suppress(TransportLost):
                return await ops.files.stat(target, str(path), sha256=True)
    raise AssertionError("three stats in a row were lost")


@contextlib.contextmanager
def creations(directory: Path) -> Iterator[int]:
    """An inotify descriptor (Linux) reporting the files created in ``directory``: the trigger of a kill
    aimed at the moment the agent writes the temporary file (it is created, then written and synced)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        if libc.inotify_add_watch(fd, os.fsencode(directory), _IN_CREATE) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")
        yield fd
    finally:
        os.close(fd)


_IN_CREATE = 0x100
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, name length


async def temporary_file_created(fd: int) -> None:
    while True:
        await anyio.wait_readable(fd)
        with contextlib.suppress(BlockingIOError):
            events, at = os.read(fd, 65536), 0
            while at < len(events):
                *_, size = _EVENT.unpack_from(events, at)
                name = events[at + _EVENT.size : at + _EVENT.size + size]
                at += _EVENT.size + size
                if b".rog-" in name:
                    return


@pytest.mark.slow
async def test_killing_the_agent_during_large_writes_leaves_old_or_new_content_never_a_mix(
    peer: Peer, shared_dir: Path
) -> None:
    """The agent is killed with SIGKILL at a random moment (a fault injection point, not a wait) while it
    writes 4 MiB, 25 rounds per peer (50 in all, the issue's count): every other kill lands anywhere in
    the write (mostly while the content travels), the others just after the agent created its temporary
    file (while it writes and syncs it, or renames it). After each round a stat by the next agent names
    the content's SHA-256, and the file on disk agrees."""
    work = shared_dir / "w"
    work.mkdir()
    work.chmod(0o777)
    path = work / "big"
    versions = [bytes([i]) * (4 << 20) for i in range(3)]
    digests = {sha(v) for v in versions}
    rng = random.Random(1234)
    lost = mid_write = 0
    strays: set[str] = set()
    async with peer.ops(carrier="agent") as ops:
        took = []
        await ops.files.write(peer.name, str(path), versions[0])
        for version in versions:  # how long a write takes in the rounds' conditions: on the next agent
            await ops.prepare(peer.name)
            os.kill(ops.stats().carriers[peer.name].agent_pid or 0, signal.SIGKILL)
            await stat_after_a_kill(ops, peer.name, path)
            await ops.prepare(peer.name)
            started = time.monotonic()
            await ops.files.write(peer.name, str(path), version)
            took.append(time.monotonic() - started)
        window = sorted(took)[1]
        for round_ in range(25):
            await ops.prepare(peer.name)
            pid = ops.stats().carriers[peer.name].agent_pid
            assert pid is not None

            async def kill_later(fd: int, pid: int = pid, round_: int = round_) -> None:
                if round_ % 2:
                    with anyio.move_on_after(10):  # bounded: the write always creates one
                        await temporary_file_created(fd)
                    await anyio.sleep(rng.uniform(0, 0.004))
                else:
                    await anyio.sleep(rng.uniform(0, window))
                with contextlib.suppress(ProcessLookupError):  # a previous round's agent, already gone
                    os.kill(pid, signal.SIGKILL)

            with creations(work) as fd:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(kill_later, fd)
                    try:
                        with anyio.fail_after(30):
                            await ops.files.write(peer.name, str(path), versions[1 + round_ % 2])
                    except TransportLost:
                        lost += 1
            # a new temporary file left next to it: this kill landed while the agent was writing the file
            left = {name for name in os.listdir(work) if ".rog-" in name}
            mid_write += bool(left - strays)
            strays |= left
            told = await stat_after_a_kill(ops, peer.name, path)
            assert told.sha256 in digests
            assert (told.sha256, told.size) == (sha(path.read_bytes()), 4 << 20)
        # the next write in the directory sweeps the temporary files the killed agents left
        await ops.files.write(peer.name, str(path), versions[0])
        final = await ops.files.stat(peer.name, str(path), sha256=True)
    assert final.sha256 == sha(path.read_bytes()) == sha(versions[0])
    assert os.listdir(work) == ["big"]
    assert (lost > 0, mid_write > 0) == (True, True)


async def test_a_patch_whose_third_hunk_fails_leaves_the_file_byte_identical(
    peer: Peer, shared_dir: Path
) -> None:
    path = shared_dir / "app.conf"
    original = b"port = 80\nhost = a\nmode = x\nmode = x\n\xff binary tail\n"
    path.write_bytes(original)
    path.chmod(0o666)
    before = path.stat()
    good = [Hunk(b"port = 80", b"port = 8080"), Hunk(b"host = a\n", b"host = b\nextra = 1\n")]
    async with peer.ops() as ops:
        with pytest.raises(FileConflict) as failed:
            await ops.files.patch(peer.name, str(path), [*good, Hunk(b"mode = x", b"mode = y")])
        assert (path.read_bytes(), path.stat().st_ino) == (original, before.st_ino)
        with pytest.raises(FileConflict) as stale:
            await ops.files.patch(peer.name, str(path), good, expected_sha256=sha(b"other"))
        done = await ops.files.patch(
            peer.name,
            str(path),
            [*good, Hunk(b"mode = x", b"mode = y", count=2)],
            expected_sha256=sha(original),
        )
    assert (failed.value.reason, failed.value.hunk, failed.value.occurrences) == ("hunk_mismatch", 3, 2)
    assert stale.value.reason == "sha256_mismatch"
    expected = b"port = 8080\nhost = b\nextra = 1\nmode = y\nmode = y\n\xff binary tail\n"
    assert path.read_bytes() == expected
    assert (done.previous_sha256, done.sha256) == (sha(original), sha(expected))
    assert [(h.index, h.replaced, h.line, h.lines_removed, h.lines_added) for h in done.hunks] == [
        (1, 1, 1, 1, 1),
        (2, 1, 2, 1, 2),
        (3, 2, 4, 2, 2),
    ]


async def test_grep_skips_a_binary_file_and_reports_line_numbers_with_context(
    peer: Peer, shared_dir: Path
) -> None:
    (shared_dir / "src").mkdir()
    (shared_dir / "src" / "a.py").write_bytes(b"import os\n# TODO one\nx = 1\n")
    (shared_dir / "src" / "b.txt").write_bytes(b"TODO in text\n")
    (shared_dir / "src" / "blob.py").write_bytes(b"TODO\0binary\n")
    (shared_dir / "src" / "skip.py").write_bytes(b"TODO excluded\n")
    async with peer.ops() as ops:
        found = await ops.files.grep(
            peer.name, str(shared_dir / "src"), r"TODO \w+", include=["*.py"], exclude=["skip*"], context=1
        )
        bounded = await ops.files.grep(peer.name, str(shared_dir / "src"), "TODO", max_matches=1)
    assert [(m.path, m.line, m.text, m.before, m.after) for m in found.matches] == [
        ("a.py", 2, "# TODO one", ["import os"], ["x = 1"])
    ]
    assert [(s.path, s.reason) for s in found.skipped] == [("blob.py", "binary")]
    assert (found.files_searched, found.truncated) == (1, False)
    assert ([m.path for m in bounded.matches], bounded.truncated) == (["a.py"], True)


async def test_find_filters_by_glob_type_and_size_in_a_bounded_deterministic_order(
    peer: Peer, shared_dir: Path
) -> None:
    root = shared_dir / "tree"
    for rel, size in (("z.log", 10), ("a/b.log", 2000), ("a/c.txt", 5), ("a/d/e.log", 0), ("m.log", 3)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x" * size)
    async with peer.ops() as ops:
        logs = await ops.files.find(peer.name, str(root), name="*.log", kind="file")
        small = await ops.files.find(peer.name, str(root), name="*.log", max_size=100, depth=2)
        first = await ops.files.find(peer.name, str(root), name="*.log", limit=2)
        dirs = await ops.files.find(peer.name, str(root), kind="directory")
    assert [e.path for e in logs.entries] == ["a/b.log", "a/d/e.log", "m.log", "z.log"]
    assert [e.path for e in small.entries] == ["m.log", "z.log"]
    assert ([e.path for e in first.entries], first.truncated, logs.truncated) == (
        ["a/b.log", "a/d/e.log"],
        True,
        False,
    )
    assert [e.path for e in dirs.entries] == ["a", "a/d"]


async def test_reads_by_line_return_exactly_those_lines_with_the_whole_files_sha256_and_where_they_start(
    peer: Peer, shared_dir: Path
) -> None:
    path = str(shared_dir / "lines")
    content = b"one\ntwo\n\xff\xfe three\nfour"  # binary bytes, no final newline
    (shared_dir / "lines").write_bytes(content)
    async with peer.ops() as ops:
        middle = await ops.files.read(peer.name, path, max_bytes=1 << 20, start_line=2, line_count=2)
        last = await ops.files.read(peer.name, path, max_bytes=1 << 20, start_line=4)
        first = await ops.files.read(peer.name, path, max_bytes=1 << 20, line_count=1)
        past = await ops.files.read(peer.name, path, max_bytes=1 << 20, start_line=9)
        capped = await ops.files.read(peer.name, path, max_bytes=12, start_line=2)
        with pytest.raises(InvalidRequest) as both:
            await ops.files.read(peer.name, path, max_bytes=100, offset=3, start_line=2)
    shown = [(r.content, r.offset, r.start_line, r.line_count, r.more_lines, r.past_end, r.truncated)
             for r in (middle, last, first, past, capped)]  # fmt: skip
    assert shown == [
        (b"two\n\xff\xfe three\n", 4, 2, 2, True, False, False),
        (b"four", 17, 4, 1, False, False, False),
        (b"one\n", 0, 1, 1, True, False, False),
        (b"", len(content), 9, 0, False, True, False),
        (b"two\n", 4, 2, 1, True, False, True),
    ]
    assert {(r.size, r.sha256) for r in (middle, last, first, past, capped)} == {(len(content), sha(content))}
    assert (middle.remaining, last.remaining, capped.remaining) == (4, 0, len(content) - 8)
    assert both.value.field == "start_line/line_count"


async def test_stat_of_a_symlink_shows_its_target_and_follow_describes_what_it_points_to(
    peer: Peer, shared_dir: Path
) -> None:
    (shared_dir / "real.conf").write_bytes(b"x" * 321)
    (shared_dir / "real.conf").chmod(0o604)
    (shared_dir / "link").symlink_to("real.conf")
    (shared_dir / "dangling").symlink_to("no such file")
    async with peer.ops() as ops:
        link = await ops.files.stat(peer.name, str(shared_dir / "link"))
        followed = await ops.files.stat(peer.name, str(shared_dir / "link"), follow=True, sha256=True)
        dangling = await ops.files.stat(peer.name, str(shared_dir / "dangling"))
        with pytest.raises(FileNotFound):
            await ops.files.stat(peer.name, str(shared_dir / "dangling"), follow=True)
    assert (link.type, link.symlink_target, link.size) == ("symlink", "real.conf", len("real.conf"))
    assert (followed.type, followed.symlink_target, followed.size, followed.mode) == (
        "file",
        None,
        321,
        "0604",
    )
    assert followed.sha256 == sha(b"x" * 321)
    assert (dangling.type, dangling.symlink_target) == ("symlink", "no such file")


async def test_stat_and_list_name_the_owner_and_group_of_each_entry(peer: Peer, shared_dir: Path) -> None:
    work = shared_dir / "w"
    work.mkdir()
    work.chmod(0o777)
    (work / "by-root").write_bytes(b"r")
    os.chown(work / "by-root", 0, 0)
    async with peer.ops() as ops:
        await ops.files.write(peer.name, str(work / "by-login"), b"u")
        info = await ops.files.stat(peer.name, str(work / "by-login"))
        listing = await ops.files.list(peer.name, str(work))
    login = (work / "by-login").stat()
    names = (pwd.getpwuid(login.st_uid).pw_name, grp.getgrgid(login.st_gid).gr_name)
    assert (info.uid, info.gid, info.owner, info.group) == (login.st_uid, login.st_gid, *names)
    if peer.kind == "sshd":
        assert info.owner == "ro-plain"
    assert [(e.path, e.owner, e.group) for e in listing.entries] == [
        ("by-login", *names),
        ("by-root", "root", grp.getgrgid(0).gr_name),
    ]


@pytest.mark.sshd
async def test_a_write_as_root_keeps_the_replaced_files_owner_and_mode_and_a_new_file_gets_the_umask_default(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    plain = pwd.getpwnam(sshd.users["plain"])
    kept = shared_dir / "owned-by-plain"
    kept.write_bytes(b"old")
    os.chown(kept, plain.pw_uid, plain.pw_gid)
    kept.chmod(0o640)
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    async with RemoteOps(settings, [TargetSpec(name="root", host=sshd.alias("root"))]) as ops:
        replaced = await ops.files.write("root", str(kept), b"new content")
        created = await ops.files.write("root", str(shared_dir / "fresh"), b"fresh")
        chosen = await ops.files.write("root", str(shared_dir / "chosen"), b"c", mode=0o604)
        umask = int((await ops.run("root", ["sh", "-c", "umask"])).stdout.strip(), 8)
    after, fresh = kept.stat(), (shared_dir / "fresh").stat()
    assert (replaced.created, created.created, chosen.created) == (False, True, True)
    assert (kept.read_bytes(), after.st_uid, after.st_gid, after.st_mode & 0o7777) == (
        b"new content",
        plain.pw_uid,
        plain.pw_gid,
        0o640,
    )
    assert (fresh.st_uid, fresh.st_mode & 0o7777) == (0, 0o666 & ~umask)
    assert (shared_dir / "chosen").stat().st_mode & 0o7777 == 0o604
    assert [n for n in os.listdir(shared_dir) if ".rog-" in n] == []


def _mode(path: Path) -> str:
    return f"{path.lstat().st_mode & 0o7777:04o}"


async def test_mkdir_gives_a_new_directory_exactly_the_mode_asked_setgid_and_sticky_included(
    peer: Peer, shared_dir: Path
) -> None:
    asked = {
        "setgid": 0o2775,
        "sticky": 0o1777,
        "both": 0o3770,
        "private": 0o700,
        "none": 0o000,
        "setgid-only": 0o2000,
    }
    async with peer.ops() as ops:
        made = {name: await ops.files.mkdir(peer.name, str(shared_dir / name), mode=mode)
                for name, mode in asked.items()}  # fmt: skip
        default = await ops.files.mkdir(peer.name, str(shared_dir / "default"))
        nested = await ops.files.mkdir(peer.name, str(shared_dir / "a" / "b"), parents=True, mode=0o2750)
        umask = int((await ops.run(peer.name, ["sh", "-c", "umask"])).stdout.strip(), 8)
    assert umask & 0o022  # the umask would cut these modes if it applied
    for name, mode in asked.items():
        assert (name, _mode(shared_dir / name), made[name].mode, made[name].created) == (
            name, f"{mode:04o}", f"{mode:04o}", True)  # fmt: skip
    assert (_mode(shared_dir / "default"), default.mode) == (f"{0o777 & ~umask:04o}",) * 2
    # like mkdir -p -m: the mode is the new directory's; a missing parent gets the default
    assert (_mode(shared_dir / "a" / "b"), nested.mode) == ("2750", "2750")
    assert _mode(shared_dir / "a") == f"{0o777 & ~umask:04o}"


async def test_mkdir_with_parents_leaves_an_existing_directory_and_its_mode_alone(
    peer: Peer, shared_dir: Path
) -> None:
    there = shared_dir / "there"
    there.mkdir()
    there.chmod(0o751)
    async with peer.ops() as ops:
        again = await ops.files.mkdir(peer.name, str(there), parents=True, mode=0o2777)
    assert (again.created, again.mode, _mode(there)) == (False, "0751", "0751")


async def test_mkdir_in_a_setgid_directory_keeps_the_inherited_setgid_by_default_and_gives_an_exact_mode(
    peer: Peer, shared_dir: Path
) -> None:
    shared = shared_dir / "team"
    shared.mkdir()
    os.chown(shared, 0, 0)  # a group the sshd fixture's plain user is not in
    shared.chmod(0o2777)
    async with peer.ops() as ops:
        default = await ops.files.mkdir(peer.name, str(shared / "default"))
        kept = await ops.files.mkdir(peer.name, str(shared / "kept"), mode=0o2770)
        cleared = await ops.files.mkdir(peer.name, str(shared / "cleared"), mode=0o750)
        umask = int((await ops.run(peer.name, ["sh", "-c", "umask"])).stdout.strip(), 8)
    assert (default.mode, _mode(shared / "default")) == (f"{0o2777 & ~umask:04o}",) * 2
    assert (kept.mode, _mode(shared / "kept"), (shared / "kept").stat().st_gid) == ("2770", "2770", 0)
    assert (cleared.mode, _mode(shared / "cleared")) == ("0750", "0750")


async def test_write_sets_a_mode_with_setuid_setgid_and_sticky_bits_exactly(
    peer: Peer, shared_dir: Path
) -> None:
    (shared_dir / "replaced").write_bytes(b"old")
    (shared_dir / "replaced").chmod(0o666)  # the sshd fixture's plain user may replace it
    async with peer.ops() as ops:
        created = await ops.files.write(peer.name, str(shared_dir / "tool"), b"#!/bin/sh\n", mode=0o6751)
        replaced = await ops.files.write(peer.name, str(shared_dir / "replaced"), b"new", mode=0o1640)
        kept = await ops.files.write(peer.name, str(shared_dir / "tool"), b"#!/bin/sh\ntrue\n")
    assert (created.created, replaced.created, kept.created) == (True, False, False)
    assert (_mode(shared_dir / "tool"), _mode(shared_dir / "replaced")) == ("6751", "1640")


async def test_find_keeps_only_entries_inside_its_mtime_bounds_which_include_their_ends(
    peer: Peer, shared_dir: Path
) -> None:
    work = shared_dir / "w"
    work.mkdir()
    for name, mtime in (("old", 1_000_000_000), ("mid", 1_500_000_000), ("new", time.time() - 60)):
        (work / name).write_bytes(name.encode())
        os.utime(work / name, (mtime, mtime))
    async with peer.ops() as ops:
        since = await ops.files.find(peer.name, str(work), mtime_min=1_500_000_000)
        until = await ops.files.find(peer.name, str(work), mtime_max=1_500_000_000)
        between = await ops.files.find(peer.name, str(work), mtime_min=1.2e9, mtime_max=1.6e9)
        none = await ops.files.find(peer.name, str(work), mtime_min=1.6e9, mtime_max=1.2e9)
    assert [e.path for e in since.entries] == ["mid", "new"]
    assert [e.path for e in until.entries] == ["mid", "old"]
    assert ([e.path for e in between.entries], between.entries[0].mtime) == (["mid"], 1_500_000_000)
    assert (none.entries, none.truncated) == ([], False)


async def test_grep_stops_at_its_byte_bound_with_the_first_matches_in_order(
    peer: Peer, shared_dir: Path
) -> None:
    (shared_dir / "log").write_bytes(b"".join(b"match %02d " % n + b"." * 90 + b"\n" for n in range(1, 11)))
    async with peer.ops() as ops:
        bounded = await ops.files.grep(peer.name, str(shared_dir), "match", max_bytes=400)
        whole = await ops.files.grep(peer.name, str(shared_dir), "match")
    assert bounded.truncated
    assert 1 <= len(bounded.matches) < 10
    assert sum(len(m.text) for m in bounded.matches) <= 400
    assert [m.line for m in bounded.matches] == list(range(1, len(bounded.matches) + 1))
    assert ([m.line for m in whole.matches], whole.truncated) == (list(range(1, 11)), False)
