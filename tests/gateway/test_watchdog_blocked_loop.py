"""The watchdog pings come from the event loop: a blocked loop sends no WATCHDOG=1, so systemd's watchdog
would fire. A real gateway subprocess, a real notify socket; the loop is blocked on purpose by a SIGUSR1
handler that sleeps in the main thread (Python runs signal handlers on the main thread, which runs the loop).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.gateway_proc import write_config
from tests.fixtures.procs import stop_process

pytestmark = pytest.mark.slow

WATCHDOG_USEC = 400_000
"""systemd would expect a ping every 0.4 s; the gateway pings every 0.2 s."""
BLOCK_S = 2.0

_LAUNCH = """
import os, signal, socket, sys, time

def block(*_):  # runs on the main thread, which runs the event loop: the loop stands still meanwhile
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(b"BLOCKING=1", os.environ["NOTIFY_SOCKET"])  # ordered after any ping already sent
        time.sleep(float(sys.argv[1]))
        s.sendto(b"UNBLOCKED=1", os.environ["NOTIFY_SOCKET"])  # ordered before any ping sent after it

signal.signal(signal.SIGUSR1, block)
from gateway.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    directory = tempfile.mkdtemp(prefix="rogwd-", dir="/tmp")
    path = f"{directory}/notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    try:
        yield sock, path
    finally:
        sock.close()
        Path(path).unlink(missing_ok=True)
        os.rmdir(directory)


def _receive(sock: socket.socket, until: float) -> list[tuple[float, str]]:
    """Every datagram until the monotonic time ``until``, stamped on arrival."""
    return _receive_until(sock, until, lambda _: False)


def _receive_until(
    sock: socket.socket, until: float, enough: Callable[[list[tuple[float, str]]], bool]
) -> list[tuple[float, str]]:
    """Datagrams, stamped on arrival, until ``enough`` of them arrived or the monotonic time ``until``."""
    got: list[tuple[float, str]] = []
    while not enough(got) and (left := until - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(4096)
        except TimeoutError:
            break
        got.append((time.monotonic(), data.decode()))
    return got


def _pings(got: list[tuple[float, str]]) -> list[float]:
    return [t for t, m in got if m == "WATCHDOG=1"]


def _resumed(got: list[tuple[float, str]]) -> list[float]:
    """The pings that arrived after UNBLOCKED=1 (none while it has not arrived)."""
    messages = [m for _, m in got]
    return _pings(got[messages.index("UNBLOCKED=1") :]) if "UNBLOCKED=1" in messages else []


def test_a_blocked_event_loop_sends_no_watchdog_pings_and_they_resume_after_it(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    cfg = write_config(tmp_path / "gateway.toml", {"state_dir": str(tmp_path / "state")})
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("REMOTEOPS_GATEWAY", "WATCHDOG_", "NOTIFY_"))
    }
    env.update({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": str(WATCHDOG_USEC)})
    argv = [
        sys.executable,
        "-c",
        _LAUNCH,
        str(BLOCK_S),
        "--config",
        str(cfg),
        "serve",
        "--http",
        "--port",
        "0",
    ]
    with (tmp_path / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        deadline = time.monotonic() + 30
        while not any(m.startswith("READY=1") for _, m in _receive(sock, time.monotonic() + 1)):
            assert proc.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline, "no READY=1 within 30 s"
        # Pings are paced by the interval plus a /healthz round trip bounded at 0.2 s: wait for three,
        # bounded, rather than counting them in a fixed window a loaded machine may not fill.
        before = _pings(_receive_until(sock, time.monotonic() + 30, lambda got: len(_pings(got)) >= 3))
        assert len(before) >= 3, f"expected pings every 0.2 s before the block, got {len(before)}"

        proc.send_signal(signal.SIGUSR1)
        # The block is bracketed by BLOCKING=1 and UNBLOCKED=1, sent from the blocking handler itself;
        # datagrams from one process arrive in the order they were sent, so a ping sent while the loop
        # stood still would arrive between the two, however late this test reads them.
        got = _receive_until(sock, time.monotonic() + BLOCK_S + 30, lambda got: len(_resumed(got)) >= 2)
        messages = [m for _, m in got]
        assert messages.count("BLOCKING=1") == 1, got
        assert messages.count("UNBLOCKED=1") == 1, got
        start, end = messages.index("BLOCKING=1"), messages.index("UNBLOCKED=1")
        during = _pings(got[start:end])
        assert during == [], f"{len(during)} pings while the loop was blocked"
        resumed = _resumed(got)
        assert len(resumed) >= 2, "the pings did not resume once the loop ran again"
        blocked_at = got[start][0]
        assert resumed[0] - blocked_at > WATCHDOG_USEC / 1e6, "systemd would have seen the silence"
    finally:
        stop_process(proc, timeout_s=15)
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
