"""Requests still queued in the gateway when the agent dies go to a fresh channel; the one already handed to
the session is ``transport_lost`` and never re-sent. Against the real sshd (the target is this machine).

To hold requests in the queue for certain, the target's ControlMaster is stopped (SIGSTOP): the master is the
process that reads the agent session's stdin (the mux client hands its descriptors over), so the pipe fills
after 64 KiB and the gateway's one writer stays inside the write of a request with a large stdin (smaller
than the channel's high-water mark, so no sender waits for back-pressure). Requests made after that wait in
the queue, unwritten. Then the agent is killed on the target; once sshd's report of its end has reached the
stopped master's socket the master is resumed, reads that report first and ends the session: the queued
requests must run on a new agent.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import signal
import termios
import uuid
from pathlib import Path

import anyio
import pytest

from remoteops import RemoteOps, TargetSpec, TransportLost, TransportSettings
from tests.fixtures.procs import processes_mentioning
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd, pytest.mark.slow]

BIG_STDIN = 768 * 1024  # far beyond the pipe (64 KiB), below the channel's 1 MiB high-water mark
QUEUED = 5


def _ppid(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def _agent_session_pid() -> int:
    """Our child ssh process carrying the agent (its remote command holds the loader)."""
    found = [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _ppid(entry.name) == os.getpid() and b"rog-agent" in _cmdline(entry)
    ]
    assert len(found) == 1, found
    return found[0]


def _cmdline(entry: Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""


def _stdin_pipe_full(session_pid: int) -> bool:
    """Whether the pipe to ``session_pid``'s stdin holds as much as it can (our end of it, FIONREAD)."""
    link = os.readlink(f"/proc/{session_pid}/fd/0")
    assert link.startswith("pipe:"), link
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == link:
                fd = int(name)
                queued = array.array("i", [0])
                fcntl.ioctl(fd, termios.FIONREAD, queued)
                return queued[0] >= fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    raise AssertionError(f"no descriptor of ours writes {link}")


def _tcp_rx_queue(pid: int) -> int:
    """Bytes received and not yet read on ``pid``'s TCP sockets (``/proc/net/tcp``)."""
    inodes = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{name}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                total += int(fields[4].split(":")[1], 16)
    return total


async def test_requests_queued_when_the_agent_dies_run_on_a_fresh_channel_and_the_written_one_is_lost(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    marker = f"rogrequeue-{uuid.uuid4().hex}"
    # master_check_idle_s: a channel idle that long has its master mux-checked before the next request;
    # against the stopped master that check would time out and end the channel before anything is queued
    # (a loaded machine can take over the default 1 s between the first call and the next ones)
    settings = TransportSettings(
        ssh_config_file=sshd.ssh_config,
        control_dir=sshd.control_dir,
        carrier="agent",
        master_check_idle_s=3600,
    )
    lost: list[TransportLost] = []
    answers: dict[int, str] = {}

    async def written(ops: RemoteOps) -> None:
        argv = ["sh", "-c", 'echo ran >> "$1"; cat >/dev/null', "x", str(shared_dir / "big-ran")]
        with pytest.raises(TransportLost) as info:
            await ops.run("plain", argv, stdin=b"x" * BIG_STDIN, env={"ROG_TEST_MARK": marker}, timeout_s=30)
        lost.append(info.value)

    async def queued(ops: RemoteOps, i: int) -> None:
        answers[i] = (await ops.run("plain", ["echo", f"queued {i}"], timeout_s=30)).stdout

    async with RemoteOps(settings, [TargetSpec(name="plain", host=sshd.alias("plain"))]) as ops:
        await ops.run("plain", ["true"])
        agent = ops.stats().carriers["plain"].agent_pid
        master = {t.name: t for t in await ops.list_targets()}["plain"].multiplex.master_pid
        assert agent is not None
        assert master is not None
        session = _agent_session_pid()
        os.kill(master, signal.SIGSTOP)
        try:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(written, ops)
                    while not _stdin_pipe_full(session):  # noqa: ASYNC110 - a kernel buffer, no event to wait on
                        await anyio.sleep(0.01)
                    for i in range(QUEUED):
                        tg.start_soon(queued, ops, i)
                    await anyio.wait_all_tasks_blocked()
                    in_flight = ops.stats().carriers["plain"].requests_in_flight
                    assert _tcp_rx_queue(master) == 0
                    os.kill(agent, signal.SIGKILL)
                    while _tcp_rx_queue(master) == 0:  # noqa: ASYNC110 - sshd's exit report, in a kernel queue
                        await anyio.sleep(0.01)
                    os.kill(master, signal.SIGCONT)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(master, signal.SIGCONT)
            for pid in processes_mentioning(marker, environ=True):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        state = ops.stats().carriers["plain"]
        stats = ops.stats()
    assert in_flight == 1 + QUEUED  # every request was on the old channel when its agent died
    assert len(lost) == 1
    assert lost[0].command_started is not False  # handed to the session: it may have run
    assert answers == {i: f"queued {i}\n" for i in range(QUEUED)}  # each ran once, on the new agent
    assert state.channels_started == 2
    assert state.agent_pid not in (None, agent)
    assert stats.masters_created == 1  # the same master (stopped, not dead) carries the new agent
