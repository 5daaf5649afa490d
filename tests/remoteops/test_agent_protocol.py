"""The agent program and its framed protocol, run locally through the real loader (no ssh in between)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoteops import TransportError
from remoteops._process import supervised_child
from remoteops.agent import program as proto
from remoteops.agent.boot import EXIT_CHECKSUM, StartScanner, new_boot
from remoteops.agent.exec import raw_result
from tests.fixtures.procs import pid_runs
from tests.fixtures.profiles import examples

pytestmark = pytest.mark.anyio
# the sleeps' durations (about 300 s) carry this process's pid: the process-table checks below find this
# test's sleeps only, never another test's (tests/gateway/test_remote_tools.py sleeps 331 to 333)
_S = f"300.{os.getpid()}0"  # + one digit: 300.<pid>0<n> seconds

PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python3.8")
PYTHONS = [
    pytest.param(shutil.which("python3") or "python3", id="python3"),
    pytest.param(
        str(PY38),
        id="python3.8",
        marks=pytest.mark.skipif(not PY38.exists(), reason="no Python 3.8 interpreter on this machine"),
    ),
]
Frame = tuple[int, int, int, dict[str, Any] | None, bytes]
MARKER = "0123456789abcdef"
BASE = {"limit_s": 10, "kill_s": 1, "head": 4096, "tail": 4096, "env": {}, "marker": MARKER}


class _AnyStart:
    """Drops the loader's start marker line whatever its nonce, when the stream starts with it (for
    ``boot_command()``, whose marker the caller does not know); a stream that starts with a frame (a loader
    of a test's own) passes as it is. No frame starts with the marker's first byte: its length would exceed
    ``MAX_BODY``."""

    def __init__(self) -> None:
        self._held = b""
        self._decided = False

    def feed(self, chunk: bytes) -> bytes:
        if self._decided:
            return chunk
        self._held += chunk
        if not self._held.startswith(MARKER_PREFIX[: len(self._held)]):
            self._decided = True  # frames from the first byte
        elif len(self._held) >= MARKER_LEN:
            self._decided = True
            self._held = self._held[MARKER_LEN:]
        else:
            return b""
        rest, self._held = self._held, b""
        return rest


MARKER_LEN = len(new_boot().marker)
MARKER_PREFIX = new_boot().marker[:5]
assert MARKER_PREFIX[0] << 24 > proto.MAX_BODY


class Agent:
    def __init__(self, proc: anyio.abc.Process, marker: bytes | None = None) -> None:
        self.proc = proc
        # the loader's start marker precedes the frames
        self.start = StartScanner(marker) if marker is not None else _AnyStart()
        self.reader = proto.FrameReader()
        self.frames: list[Frame] = []

    async def send(self, frame: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(frame)

    async def final(self, rid: int) -> Frame:
        """The next RESULT or ERROR for ``rid`` (frames of other requests are kept)."""
        assert self.proc.stdout is not None
        with anyio.fail_after(15):
            while True:
                for frame in self.frames:
                    if frame[0] == rid and frame[1] in (proto.RESULT, proto.ERROR, proto.HELLO):
                        self.frames.remove(frame)
                        return frame
                self.frames += self.reader.feed(self.start.feed(await self.proc.stdout.receive(65536)))


@asynccontextmanager
async def local_agent(python: str, *, source: bytes | None = None) -> AsyncIterator[Agent]:
    boot = new_boot()
    async with supervised_child(["sh", "-c", boot.command(python)], stdin=subprocess.PIPE) as proc:
        agent = Agent(proc, boot.marker)
        await agent.send(source if source is not None else boot.source)
        yield agent


async def _hello(agent: Agent, low: int = proto.PROTOCOL_MIN, high: int = proto.PROTOCOL_MAX) -> Frame:
    await agent.send(proto.encode(0, proto.HELLO, {"min": low, "max": high}))
    return await agent.final(0)


@settings(max_examples=examples(100), deadline=None)
@given(
    frames=st.lists(
        st.tuples(
            st.integers(0, 2**32 - 1),
            st.integers(0, 255),
            st.integers(0, 255),
            st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=10), max_size=3)),
            st.binary(max_size=300),
        ),
        max_size=6,
    ),
    chunk=st.integers(1, 64),
)
def test_frames_survive_any_chunking_byte_exact(frames: list[Frame], chunk: int) -> None:
    wire = b"".join(proto.encode(rid, kind, meta, data, flags) for rid, kind, flags, meta, data in frames)
    reader = proto.FrameReader()
    decoded: list[Frame] = []
    for offset in range(0, len(wire), chunk):
        decoded += reader.feed(wire[offset : offset + chunk])
    assert decoded == frames


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 60),
    st.text(max_size=3),
    st.lists(st.integers(-3, 60), max_size=4),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    meta=st.dictionaries(
        st.sampled_from(["exit", "out", "err", "signal", "killed", "survivors", "duration_s", "timed_out"]),
        _VALUES,
    ),
    data=st.binary(max_size=60),
)
def test_a_malformed_result_is_a_transport_error_never_a_crash(meta: dict[str, Any], data: bytes) -> None:
    try:
        raw = raw_result(meta, data, target="t", multiplexed=False, elapsed_s=0.0)
    except TransportError:
        return
    kept = len(raw.stdout.head) + len(raw.stdout.tail) + len(raw.stderr.head) + len(raw.stderr.tail)
    assert kept <= len(data)
    assert min(raw.stdout.dropped, raw.stderr.dropped) >= 0


def test_a_frame_longer_than_the_limit_is_a_protocol_error() -> None:
    header = proto.HEADER.pack(proto.MAX_BODY + 1, 1, proto.EXEC, 0)
    with pytest.raises(ValueError, match="frame length"):
        proto.FrameReader().feed(header)


@pytest.mark.parametrize("python", PYTHONS)
async def test_the_agent_runs_commands_on_every_supported_python(python: str) -> None:
    async with local_agent(python) as agent:
        hello = await _hello(agent)
        assert hello[1] == proto.HELLO
        assert hello[3] is not None
        assert hello[3]["version"] == proto.PROTOCOL_MAX
        await agent.send(
            proto.encode(1, proto.EXEC, {**BASE, "argv": ["sh", "-c", "cat; echo e >&2; exit 3"]})
        )
        await agent.send(proto.encode(2, proto.EXEC, {**BASE, "argv": ["cat"], "stdin": True}))
        await agent.send(proto.encode(1, proto.DATA, None, b"ignored: no stdin requested", proto.F_END))
        await agent.send(proto.encode(2, proto.DATA, None, bytes(range(256)), 0))
        await agent.send(proto.encode(2, proto.DATA, None, b"end", proto.F_END))
        first, second = await agent.final(1), await agent.final(2)
    assert first[1] == second[1] == proto.RESULT
    assert first[3] is not None
    assert second[3] is not None
    assert (first[3]["exit"], first[4]) == (3, b"e\n")
    assert (second[3]["exit"], second[4]) == (0, bytes(range(256)) + b"end")


async def test_a_protocol_version_mismatch_is_answered_and_the_agent_exits() -> None:
    async with local_agent("python3") as agent:
        answer = await _hello(agent, proto.PROTOCOL_MAX + 1, proto.PROTOCOL_MAX + 5)
        with anyio.fail_after(10):
            code = await agent.proc.wait()
    assert answer[1] == proto.ERROR
    assert answer[3] is not None
    assert answer[3]["code"] == "version"
    assert code == 0


async def test_requests_before_hello_and_reserved_kinds_get_an_error_answer() -> None:
    async with local_agent("python3") as agent:
        await agent.send(proto.encode(5, proto.EXEC, {**BASE, "argv": ["true"]}))
        early = await agent.final(5)
        await _hello(agent)
        answers = {}
        for rid, kind in enumerate((proto.WAIT, 0x7F), 10):
            await agent.send(proto.encode(rid, kind, {"path": "/"}))
            answers[kind] = await agent.final(rid)
    assert early[1] == proto.ERROR
    assert early[3] is not None
    assert early[3]["code"] == "hello_first"
    assert {kind: (f[1], (f[3] or {}).get("code")) for kind, f in answers.items()} == dict.fromkeys(
        answers, (proto.ERROR, "unsupported")
    )


async def test_the_agent_exits_when_its_stdin_closes_and_kills_what_it_started() -> None:
    async with local_agent("python3") as agent:
        await _hello(agent)
        await agent.send(
            proto.encode(1, proto.EXEC, {**BASE, "argv": ["sh", "-c", f"setsid sleep {_S}1 & sleep {_S}2"]})
        )
        assert agent.proc.stdout is not None
        with anyio.fail_after(10):
            while not any(f[0] == 1 and f[1] == proto.STARTED for f in agent.frames):
                agent.frames += agent.reader.feed(await agent.proc.stdout.receive(65536))
        started = next(f for f in agent.frames if f[1] == proto.STARTED)
        assert started[3] is not None
        child = int(started[3]["pid"])
        assert agent.proc.stdin is not None
        await agent.proc.stdin.aclose()
        with anyio.fail_after(10):
            code = await agent.proc.wait()
    assert code == 0
    assert not pid_runs(child)
    assert _pids_with_cmdline(f"sleep\0{_S}1\0".encode()) == []


async def test_a_weak_marker_is_refused() -> None:
    async with local_agent("python3") as agent:
        await _hello(agent)
        await agent.send(proto.encode(1, proto.EXEC, {**BASE, "marker": "m", "argv": ["true"]}))
        answer = await agent.final(1)
    assert answer[1] == proto.ERROR
    assert (answer[3] or {}).get("code") == "bad_request"


async def test_a_kill_never_reaches_a_process_outside_the_agents_tree_even_with_the_marker() -> None:
    outsider_env = {**os.environ, "ROG_CALL": MARKER}
    sleeper = ["sleep", f"{_S}3"]
    async with supervised_child(sleeper, stdout=subprocess.DEVNULL, env=outsider_env) as outsider:
        await _until_exec(outsider.pid, f"ROG_CALL={MARKER}".encode())
        async with local_agent("python3") as agent:
            await _hello(agent)
            argv = ["sh", "-c", f"setsid sleep {_S}4 & sleep {_S}5"]
            await agent.send(proto.encode(1, proto.EXEC, {**BASE, "argv": argv, "limit_s": 0.3}))
            result = await agent.final(1)
        assert outsider.returncode is None
        assert _pids_with_cmdline(f"sleep\0{_S}3\0".encode()) == [outsider.pid]
    assert result[3] is not None
    assert result[3]["timed_out"] is True
    assert result[3]["killed"] is True
    assert _pids_with_cmdline(f"sleep\0{_S}4\0".encode()) == []


async def test_the_loader_refuses_bytes_that_are_not_the_agent() -> None:
    real = new_boot().source
    tampered = real.replace(b"PROTOCOL_MAX = 1", b"PROTOCOL_MAX = 9")
    assert len(tampered) == len(real)
    async with local_agent("python3", source=tampered) as agent:
        with anyio.fail_after(10):
            code = await agent.proc.wait()
    assert code == EXIT_CHECKSUM


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


async def _until_exec(pid: int, entry: bytes) -> None:
    """Wait (bounded) until the child has exec'd: /proc/PID/environ reads empty between fork and exec."""
    with anyio.fail_after(10):
        # another process's exec has no event to wait on: poll /proc, bounded
        while entry not in _environ(pid):  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _pids_with_cmdline(needle: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found
