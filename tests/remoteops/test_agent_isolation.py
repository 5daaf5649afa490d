"""No request can stall or crash the agent's channel, and nothing a call starts escapes it: the agent run
locally through the real loader (no ssh in between), driven frame by frame. The target is this machine,
so the tests look at its process table directly."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops._process import supervised_child
from remoteops.agent import program as proto
from remoteops.agent.boot import boot_command
from tests.fixtures.procs import wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.test_agent_protocol import (
    BASE,
    PYTHONS,
    Agent,
    Frame,
    _hello,
    _pids_with_cmdline,
    local_agent,
)

pytestmark = pytest.mark.anyio

# sleeps whose durations carry this process's pid: the process-table checks find this test's only
_S = f"400.{os.getpid()}0"  # + one digit
EVIL = "^(a+)+$"  # catastrophic backtracking on 'a' * 40 + '!': never ends in Python's re


def wire(path: Path | bytes) -> str:
    return proto.wire_text(bytes(path) if isinstance(path, bytes) else os.fsencode(path))


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != b"Z":  # a zombie has ended already
                found.append(int(entry))
    return found


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])


def _kill_sleeps(tag: str) -> None:
    for pid in _pids_with_cmdline(f"sleep\0{tag}".encode()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def evil_file(tmp_path: Path) -> Path:
    path = tmp_path / "evil.txt"
    path.write_bytes(b"a" * 40 + b"!\n")
    return path


async def _ping(agent: Agent, rid: int) -> float:
    """Seconds until a PING is answered."""
    start = time.monotonic()
    await agent.send(proto.encode(rid, proto.PING, {}))
    answer = await agent.final(rid)
    assert (answer[1], answer[3]) == (proto.RESULT, {})
    return time.monotonic() - start


async def _all_finals(agent: Agent, rids: set[int], ceiling_s: float = 30) -> dict[int, Frame]:
    """Every final frame of ``rids``, in any order."""
    assert agent.proc.stdout is not None
    got: dict[int, Frame] = {}
    with anyio.fail_after(ceiling_s):
        while len(got) < len(rids):
            for frame in list(agent.frames):
                if frame[0] in rids and frame[1] in (proto.RESULT, proto.ERROR):
                    agent.frames.remove(frame)
                    got[frame[0]] = frame
            if len(got) < len(rids):
                agent.frames += agent.reader.feed(await agent.proc.stdout.receive(65536))
    return got


@pytest.mark.parametrize("python", PYTHONS)
async def test_a_runaway_grep_ends_as_timeout_and_the_channel_keeps_answering(
    python: str, evil_file: Path
) -> None:
    async with local_agent(python) as agent:
        hello = await _hello(agent)
        await agent.send(
            proto.encode(1, proto.GREP, {"path": wire(evil_file), "pattern": EVIL, "limit_s": 2})
        )
        start = time.monotonic()
        ping_s = await _ping(agent, 2)
        answer = await agent.final(1)
        took = time.monotonic() - start
        await agent.send(proto.encode(3, proto.STAT, {"path": wire(evil_file)}))
        after = await agent.final(3)
    assert hello[3] is not None
    assert proto.PING in hello[3]["kinds"]
    assert ping_s < 1.0
    assert answer[1] == proto.ERROR
    assert answer[3] is not None
    assert answer[3]["code"] == "timeout"
    assert answer[3]["limit_s"] == 2
    assert 2 <= took < 6
    assert after[1] == proto.RESULT


async def test_beside_a_grep_of_seconds_and_one_that_never_ends_a_one_second_exec_is_killed_in_time(
    tmp_path: Path, evil_file: Path
) -> None:
    slow = tmp_path / "slow.txt"
    slow.write_bytes(b"a" * 24 + b"!\n")  # seconds of backtracking
    argv = ["sh", "-c", f"echo out; echo err >&2; exec sleep {_S}1"]
    try:
        async with local_agent("python3") as agent:
            await _hello(agent)
            await agent.send(proto.encode(1, proto.GREP, {"path": wire(slow), "pattern": EVIL}))
            await agent.send(
                proto.encode(2, proto.GREP, {"path": wire(evil_file), "pattern": EVIL, "limit_s": 4})
            )
            start = time.monotonic()
            await agent.send(proto.encode(3, proto.EXEC, {**BASE, "argv": argv, "limit_s": 1}))
            result = await agent.final(3)
            took = time.monotonic() - start
            ping_s = await _ping(agent, 4)
            finals = await _all_finals(agent, {1, 2})
    finally:
        _kill_sleeps(f"{_S}1")
    assert result[1] == proto.RESULT
    assert result[3] is not None
    assert took < 1.5
    assert (result[3]["timed_out"], result[3]["killed"], result[3]["survivors"]) == (True, True, [])
    assert result[4] == b"out\nerr\n"
    assert ping_s < 1.0
    assert finals[1][1] == proto.RESULT
    assert (finals[1][3] or {}).get("matches") == []
    assert (finals[2][1], (finals[2][3] or {}).get("code")) == (proto.ERROR, "timeout")
    assert _pids_with_cmdline(f"sleep\0{_S}1".encode()) == []


async def test_fifty_concurrent_file_and_exec_requests_are_all_answered_byte_exact(tmp_path: Path) -> None:
    rng = random.Random(23)
    contents = {rid: rng.randbytes(rng.randrange(1, 200_000)) for rid in range(1, 51) if rid % 2}
    for rid, blob in contents.items():
        (tmp_path / f"f{rid}").write_bytes(blob)
    stdins = {rid: rng.randbytes(rng.randrange(1, 200_000)) for rid in range(1, 51) if not rid % 2}
    async with local_agent("python3") as agent:
        await _hello(agent)
        for rid in range(1, 51):
            if rid in contents:
                meta = {"path": wire(tmp_path / f"f{rid}"), "length": 1_000_000}
                await agent.send(proto.encode(rid, proto.READ, meta))
            else:
                await agent.send(proto.encode(rid, proto.EXEC, {**BASE, "argv": ["cat"], "stdin": True,
                                                                "head": 300_000, "tail": 0}))  # fmt: skip
                await agent.send(proto.encode(rid, proto.DATA, None, stdins[rid], proto.F_END))
        finals = await _all_finals(agent, set(range(1, 51)))
    assert {rid: f[1] for rid, f in finals.items()} == dict.fromkeys(range(1, 51), proto.RESULT)
    assert {rid: finals[rid][4] for rid in contents} == contents
    assert {rid: finals[rid][4] for rid in stdins} == stdins


async def test_the_agent_exits_when_its_stdin_closes_while_a_grep_runs(evil_file: Path) -> None:
    async with local_agent("python3") as agent:
        hello = await _hello(agent)
        assert hello[3] is not None
        pid = int(hello[3]["pid"])
        await agent.send(proto.encode(1, proto.GREP, {"path": wire(evil_file), "pattern": EVIL}))
        await _ping(agent, 2)  # the GREP was dispatched: its worker runs
        workers = _children(pid)
        assert agent.proc.stdin is not None
        await agent.proc.stdin.aclose()
        with anyio.fail_after(10):
            code = await agent.proc.wait()
    assert code == 0
    assert workers != []
    for worker in workers:
        await wait_gone(worker)


async def test_sigterm_ends_the_agent_and_its_file_workers(evil_file: Path) -> None:
    async with local_agent("python3") as agent:
        hello = await _hello(agent)
        assert hello[3] is not None
        pid = int(hello[3]["pid"])
        await agent.send(proto.encode(1, proto.GREP, {"path": wire(evil_file), "pattern": EVIL}))
        await _ping(agent, 2)
        workers = _children(pid)
        os.kill(pid, signal.SIGTERM)
        with anyio.fail_after(10):
            code = await agent.proc.wait()
    assert code == 0
    assert workers != []
    for worker in workers:
        await wait_gone(worker)


@pytest.mark.parametrize("python", PYTHONS)
async def test_a_descendant_that_left_the_session_and_the_environment_is_killed_at_the_limit(
    python: str,
) -> None:
    script = f"setsid env -i sh -c 'exec sleep {_S}2' & sleep {_S}3"
    try:
        async with local_agent(python) as agent:
            await _hello(agent)
            await agent.send(
                proto.encode(1, proto.EXEC, {**BASE, "argv": ["sh", "-c", script], "limit_s": 1})
            )
            result = await agent.final(1)
            left = _pids_with_cmdline(f"sleep\0{_S}2".encode())
    finally:
        _kill_sleeps(f"{_S}2")
        _kill_sleeps(f"{_S}3")
    assert result[3] is not None
    assert (result[3]["timed_out"], result[3]["killed"], result[3]["survivors"]) == (True, True, [])
    assert left == []


async def test_a_command_that_exits_leaves_its_background_process_running() -> None:
    script = f"sleep {_S}4 >/dev/null 2>&1 &"
    try:
        async with local_agent("python3") as agent:
            hello = await _hello(agent)
            await agent.send(proto.encode(1, proto.EXEC, {**BASE, "argv": ["sh", "-c", script]}))
            result = await agent.final(1)
            await _ping(agent, 2)
            assert hello[3] is not None
            agent_pid = int(hello[3]["pid"])
            left = _pids_with_cmdline(f"sleep\0{_S}4".encode())
            parents = {_parent(p) for p in left}
            # The call's supervisor answers, then exits: only its exit hands the orphan to the agent (a
            # subreaper), which a loaded machine may run a moment later. Bounded wait for the hand-over.
            with anyio.move_on_after(10):
                while parents != {agent_pid}:
                    await anyio.sleep(0.05)
                    left = _pids_with_cmdline(f"sleep\0{_S}4".encode())
                    parents = {_parent(p) for p in left}
    finally:
        _kill_sleeps(f"{_S}4")
    assert result[3] is not None
    assert (result[3]["exit"], result[3]["timed_out"], result[3]["killed"]) == (0, False, False)
    assert len(left) == 1
    assert parents == {agent_pid}  # still running, re-parented to the agent once its supervisor left


async def test_when_the_agent_is_killed_its_running_calls_are_killed_by_their_supervisors() -> None:
    try:
        async with local_agent("python3") as agent:
            hello = await _hello(agent)
            assert hello[3] is not None
            argv = ["sh", "-c", f"setsid sleep {_S}5 & exec sleep {_S}6"]
            await agent.send(proto.encode(1, proto.EXEC, {**BASE, "argv": argv, "limit_s": 60}))
            assert agent.proc.stdout is not None
            with anyio.fail_after(10):
                while not any(f[0] == 1 and f[1] == proto.STARTED for f in agent.frames):
                    agent.frames += agent.reader.feed(await agent.proc.stdout.receive(65536))
            started = next(f for f in agent.frames if f[1] == proto.STARTED)
            assert started[3] is not None
            os.kill(int(hello[3]["pid"]), signal.SIGKILL)
            await wait_gone(int(started[3]["pid"]))
            with anyio.fail_after(10):
                while _pids_with_cmdline(f"sleep\0{_S}5".encode()):  # noqa: ASYNC110 - no event to wait on
                    await anyio.sleep(0.02)
    finally:
        _kill_sleeps(f"{_S}5")
        _kill_sleeps(f"{_S}6")


def _deep_chain(root: Path, depth: int) -> None:
    """``root/d/d/.../d`` ``depth`` levels deep, with a file at the bottom (made through dir fds: the
    path is longer than PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            down = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = down
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


@pytest.mark.parametrize("python", PYTHONS)
async def test_a_recursive_delete_of_a_3000_deep_tree_succeeds(python: str, tmp_path: Path) -> None:
    top = tmp_path / "deep"
    top.mkdir()
    _deep_chain(top, 3000)
    try:
        async with local_agent(python) as agent:
            await _hello(agent)
            await agent.send(proto.encode(1, proto.DELETE, {"path": wire(top), "recursive": True}))
            answer = await agent.final(1)
    finally:
        with anyio.fail_after(60):
            await anyio.run_process(["rm", "-rf", str(top)], check=False)
    assert answer[1] == proto.RESULT, answer
    assert answer[3] == {"type": "directory"}
    assert not top.exists()


@pytest.mark.parametrize("python", PYTHONS)
async def test_hello_returns_the_build_the_loader_was_given(python: str) -> None:
    source, digest = proto.agent_source()
    loader = (
        "import os,sys\nn=int(sys.argv[1]);b=b''\nwhile len(b)<n:\n c=os.read(0,n-len(b))\n"
        " if not c:sys.exit(90)\n b+=c\n"
        "exec(compile(b,'rog-agent','exec'),{'__name__':'__rog_agent__','__rog_build__':sys.argv[2]})\n"
    )
    argv = [python, "-I", "-S", "-c", loader, str(len(source)), digest]
    async with supervised_child(argv, stdin=subprocess.PIPE) as proc:
        agent = Agent(proc)
        await agent.send(source)
        hello = await _hello(agent)
    assert hello[1] == proto.HELLO
    assert hello[3] is not None
    assert hello[3]["build"] == digest


async def test_a_bad_limit_and_a_cancel_of_a_file_request_are_answers(evil_file: Path) -> None:
    async with local_agent("python3") as agent:
        await _hello(agent)
        await agent.send(proto.encode(1, proto.STAT, {"path": wire(evil_file), "limit_s": "soon"}))
        bad = await agent.final(1)
        await agent.send(proto.encode(2, proto.GREP, {"path": wire(evil_file), "pattern": EVIL}))
        await agent.send(proto.encode(2, proto.CANCEL, {"grace_s": 0.1}))
        cancelled = await agent.final(2)
        ping_s = await _ping(agent, 3)
    codes: list[Any] = [(f[1], (f[3] or {}).get("code")) for f in (bad, cancelled)]
    assert codes == [(proto.ERROR, "bad_request"), (proto.ERROR, "cancelled")]
    assert ping_s < 1.0


@pytest.mark.sshd
async def test_a_descendant_the_agent_cannot_kill_is_named_in_the_result(sshd: SshdInstance) -> None:
    """The agent runs as ro-sudo (its users come with the sshd fixture); ``sudo`` makes a root ``sleep``
    that ignores SIGTERM and that ro-sudo may not SIGKILL: ``killed`` is false and the result names it."""
    source, _ = proto.agent_source()
    argv = [
        "runuser",
        "-u",
        sshd.users["sudo"],
        "--",
        "sh",
        "-c",
        "cd / && " + boot_command("/usr/bin/python3"),
    ]
    command = ["sudo", "-n", "sh", "-c", f"trap '' TERM; exec sleep {_S}7"]
    try:
        async with supervised_child(argv, stdin=subprocess.PIPE) as proc:
            agent = Agent(proc)
            await agent.send(source)
            await _hello(agent)
            meta = {**BASE, "argv": command, "limit_s": 1, "kill_s": 0.3}
            await agent.send(proto.encode(1, proto.EXEC, meta))
            result = await agent.final(1)
            left = _pids_with_cmdline(f"sleep\0{_S}7".encode())
    finally:
        _kill_sleeps(f"{_S}7")
    assert result[3] is not None
    assert (result[3]["timed_out"], result[3]["killed"]) == (True, False)
    assert left != []
    assert set(result[3]["survivors"]) >= set(left)
    named = {p["pid"]: p["argv"] for p in result[3]["survivor_procs"]}
    assert [named[pid] for pid in left] == [["sleep", f"{_S}7"]] * len(left)


def _copied(moved: Path) -> tuple[int, int, bytes, float, str, int]:
    x = moved / "x"
    return (moved.stat().st_mode & 0o777, x.stat().st_mode & 0o777, x.read_bytes(), x.stat().st_mtime,
            os.readlink(moved / "link"), (moved / "pipe").stat().st_mode & 0o170777)  # fmt: skip


def _deep_source(top: Path, other: Path) -> None:
    if other.stat().st_dev == top.parent.stat().st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the test directory here")
    top.mkdir()
    _deep_chain(top, 3000)
    (top / "x").write_bytes(b"payload")
    (top / "x").chmod(0o604)
    os.mkfifo(top / "pipe")
    (top / "pipe").chmod(0o620)
    (top / "link").symlink_to("x")
    os.utime(top / "x", (1_000_000, 2_000_000))
    top.chmod(0o751)


async def test_a_3000_deep_tree_moves_across_filesystems_with_its_modes_and_times(tmp_path: Path) -> None:
    other = Path(tempfile.mkdtemp(prefix="rogd-", dir="/dev/shm"))
    top, moved = tmp_path / "deep", other / "deep"
    try:
        _deep_source(top, other)
        async with local_agent("python3") as agent:
            await _hello(agent)
            meta = {"source": wire(top), "destination": wire(moved)}
            await agent.send(proto.encode(1, proto.MOVE, meta))
            answer = await agent.final(1)
        with anyio.fail_after(60):
            found = await anyio.run_process(["find", str(moved), "-name", "f", "-type", "f"])
        assert answer[3] == {"cross_filesystem": True}, answer
        assert not top.exists()
        assert found.stdout.count(b"\n") == 1  # the file at the bottom, 3000 levels down
        assert _copied(moved) == (0o751, 0o604, b"payload", 2_000_000, "x", 0o010620)
    finally:
        with anyio.fail_after(60):
            await anyio.run_process(["rm", "-rf", str(top), str(other)], check=False)
