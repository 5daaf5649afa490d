"""Master liveness checks never block the event loop and always end within their bound.

Each test runs a ticker task beside the checks and asserts its largest gap stays small: a check that blocked
the loop (a blocking ``connect`` on the control socket, as before) shows up as a gap of its whole wait.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from remoteops import RemoteOps, TargetSpec, TransportSettings
from remoteops.embedded import EmbeddedTarget
from remoteops.ssh.master import _CONTROL_S, Master, mux_alive_check

pytestmark = pytest.mark.anyio

_MAX_GAP_S = 0.25  # the old blocking connect stalled the loop 0.5 s per check


class Ticker:
    """Wakes every 10 ms and records the largest gap between wake-ups."""

    def __init__(self) -> None:
        self.max_gap = 0.0

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(0.01)
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last)
            last = now


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ro-live-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nobody_accepts(short_tmp: Path) -> Iterator[Path]:
    """A unix socket that listens but never accepts, its backlog already full: a connect would wait."""
    path = short_tmp / "full"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    held: list[socket.socket] = []
    try:
        while True:  # fill the backlog (Linux admits backlog + 1 pending connections)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(str(path))
            except BlockingIOError:
                client.close()
                break
            held.append(client)
            assert len(held) < 16
        yield path
    finally:
        for client in held:
            client.close()
        listener.close()


@contextlib.asynccontextmanager
async def accepts_and_never_answers(path: Path) -> AsyncIterator[list[int]]:
    """A unix socket server that accepts every connection and never sends a byte; yields the accept count."""
    accepted: list[int] = []

    async def hold(stream: anyio.abc.SocketStream) -> None:
        accepted.append(1)
        async with stream:
            await anyio.sleep_forever()

    listener = await anyio.create_unix_listener(path)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hold)
        try:
            yield accepted
        finally:
            tg.cancel_scope.cancel()


def _master(path: Path) -> Master:
    return Master("k", TargetSpec(name="t", host="h"), path, TransportSettings())


async def test_alive_and_check_answer_at_once_when_nobody_accepts_on_the_control_socket(
    nobody_accepts: Path,
) -> None:
    master = _master(nobody_accepts)
    ticker = Ticker()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        await anyio.sleep(0.05)
        started = time.monotonic()
        with anyio.fail_after(10):
            verdicts = [master.alive for _ in range(10)]
            checks = [await master.check() for _ in range(10)]
        elapsed = time.monotonic() - started
        tg.cancel_scope.cancel()
    assert verdicts == [False] * 10
    assert checks == [False] * 10
    # neither waits nor spins until a deadline (that would be _CONTROL_S, for the first check already); the
    # twenty calls themselves take milliseconds: the rest is a loaded machine's headroom
    assert elapsed < _CONTROL_S / 2
    assert ticker.max_gap < _MAX_GAP_S


@pytest.mark.slow
async def test_a_master_socket_that_accepts_and_never_answers_is_found_dead_within_the_bound(
    short_tmp: Path,
) -> None:
    path = short_tmp / "silent"
    ticker = Ticker()
    async with accepts_and_never_answers(path) as accepted, anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        master = _master(path)
        started = time.monotonic()
        with anyio.fail_after(_CONTROL_S + 5):
            takes_connections = master.alive
            answered = await master.check()
        elapsed = time.monotonic() - started
        tg.cancel_scope.cancel()
    assert takes_connections  # alive is the cheap test; the mux round trip tells the truth
    assert answered is False
    assert accepted
    assert _CONTROL_S - 0.5 <= elapsed <= _CONTROL_S + 2
    assert ticker.max_gap < _MAX_GAP_S


@pytest.mark.slow
async def test_a_wedged_socket_at_the_control_path_is_replaced_by_a_fresh_master_without_stalling(
    short_tmp: Path,
) -> None:
    async with EmbeddedTarget(short_tmp / "w", alias="emb") as target:
        # carrier ssh: the pool accounting below counts one master use per call (an agent holds one channel)
        settings = TransportSettings(
            ssh_config_file=target.ssh_config_path, control_dir=short_tmp / "c", carrier="ssh"
        )
        targets = [TargetSpec(name="emb", host=target.alias)]
        async with RemoteOps(settings, targets) as ops:
            with anyio.fail_after(30):
                await ops.run("emb", ["true"])
                info = (await ops.list_targets())[0]
        assert info.multiplex.control_path is not None
        ticker = Ticker()
        # the socket was removed when its RemoteOps closed; binding it again would fail otherwise
        async with (
            accepts_and_never_answers(Path(info.multiplex.control_path)) as accepted,
            RemoteOps(settings, targets) as ops,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ticker.run)
            with anyio.fail_after(_CONTROL_S + 30):
                result = await ops.run("emb", ["printf", "fresh"])
            stats = ops.stats()
            tg.cancel_scope.cancel()
    assert accepted  # the pool did try the socket it found
    assert (result.exit_code, result.stdout) == (0, "fresh")
    assert (stats.masters_adopted, stats.stale_recovered, stats.masters_created) == (0, 1, 1)
    assert ticker.max_gap < _MAX_GAP_S


async def test_a_live_master_answers_the_in_process_mux_check_before_every_reuse(short_tmp: Path) -> None:
    async with EmbeddedTarget(short_tmp / "w", alias="emb") as target:
        settings = TransportSettings(  # carrier ssh: one master reuse per call is what is counted
            ssh_config_file=target.ssh_config_path,
            control_dir=short_tmp / "c",
            master_check_idle_s=0,
            carrier="ssh",
        )
        async with RemoteOps(settings, [TargetSpec(name="emb", host=target.alias)]) as ops:
            with anyio.fail_after(30):
                results = [await ops.run("emb", ["printf", str(i)]) for i in range(5)]
                info = (await ops.list_targets())[0]
                assert info.multiplex.control_path is not None
                pid = await mux_alive_check(Path(info.multiplex.control_path))
            stats = ops.stats()
    assert [r.stdout for r in results] == ["0", "1", "2", "3", "4"]
    assert (stats.masters_created, stats.masters_reused, stats.stale_recovered) == (1, 4, 0)
    assert pid is not None
    assert pid == info.multiplex.master_pid
