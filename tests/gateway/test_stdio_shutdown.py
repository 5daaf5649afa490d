"""SIGTERM stops a stdio gateway whose client keeps stdin open, as it stops an HTTP one: in-flight calls get
``server.drain_timeout_s`` to finish, the rest are answered with a shutdown error, then the process exits.

The client here is a raw JSON-RPC writer that never closes stdin (as MCP clients do while they run); the
gateway is the real ``demo --stdio`` subprocess with its embedded SSH target.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from tests.fixtures.gateway_proc import write_config

pytestmark = pytest.mark.slow  # spawns the gateway over stdio

_INIT = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


class _Lines:
    """stdout lines read by a thread into a list, so every wait below has a ceiling."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.messages: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.closed = False
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def join(self, ceiling_s: float) -> None:
        self._thread.join(ceiling_s)

    def _pump(self, stream: IO[bytes]) -> None:
        for line in stream:
            with self._cond:
                self.messages.append(json.loads(line))
                self._cond.notify_all()
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def answer(self, request_id: int, ceiling_s: float) -> dict[str, Any]:
        with self._cond:
            found = self._cond.wait_for(
                lambda: any(m.get("id") == request_id for m in self.messages) or self.closed, ceiling_s
            )
            assert found, f"no answer to {request_id} within {ceiling_s} s"
            answers = [m for m in self.messages if m.get("id") == request_id]
            assert answers, f"stdout closed without an answer to {request_id}"
            return answers[0]


@contextmanager
def _stdio_gateway(workdir: Path, drain_s: float) -> Iterator[tuple[subprocess.Popen[bytes], _Lines]]:
    cfg = write_config(
        workdir / "g.toml", {"state_dir": str(workdir / "state"), "server": {"drain_timeout_s": drain_s}}
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(cfg), "demo", "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    lines = _Lines(proc.stdout)
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdin.close()
        lines.join(10)
        proc.stdout.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rogs-", dir="/tmp"))  # the demo's control sockets: short paths
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _send(proc: subprocess.Popen[bytes], *messages: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    proc.stdin.flush()


def _call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def test_sigterm_answers_a_call_longer_than_the_drain_with_a_shutdown_error_and_exits(
    short_dir: Path,
) -> None:
    marker = short_dir / "started"
    with _stdio_gateway(short_dir, drain_s=2) as (proc, lines):
        _send(proc, *_INIT)
        lines.answer(1, 90)
        _send(proc, _call(2, "remote_exec", {"target": "demo", "shell": f"touch {marker}; sleep 50"}))
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)  # the remote side signals through a file
        os.kill(proc.pid, signal.SIGTERM)
        stopped = time.monotonic()
        answer = lines.answer(2, 20)
        assert proc.wait(timeout=20) == 0  # stdin is still open: the signal alone ends it
        took = time.monotonic() - stopped
    result = answer["result"]
    assert result["isError"] is True
    error = result["_meta"]["remoteops-gateway/error"]
    assert error["code"] == "transport_lost"  # the call may have run; it is not re-run
    assert error["details"]["reason"] == "gateway_shutdown"
    assert took < 15, took  # drain (2 s) + shutdown, far below the 50 s the command would take


def test_sigterm_lets_a_call_shorter_than_the_drain_finish_and_answer(short_dir: Path) -> None:
    marker = short_dir / "started"
    with _stdio_gateway(short_dir, drain_s=20) as (proc, lines):
        _send(proc, *_INIT)
        lines.answer(1, 90)
        _send(
            proc, _call(2, "remote_exec", {"target": "demo", "shell": f"touch {marker}; sleep 1; echo done"})
        )
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        answer = lines.answer(2, 30)
        assert proc.wait(timeout=30) == 0
    assert answer["result"].get("isError") is not True
    assert answer["result"]["structuredContent"]["stdout"] == "done\n"


def test_sigterm_ends_an_idle_stdio_gateway_whose_client_keeps_stdin_open(short_dir: Path) -> None:
    with _stdio_gateway(short_dir, drain_s=10) as (proc, lines):
        _send(proc, *_INIT)
        lines.answer(1, 90)
        os.kill(proc.pid, signal.SIGTERM)
        stopped = time.monotonic()
        assert proc.wait(timeout=20) == 0
        assert time.monotonic() - stopped < 10  # nothing to drain: no wait for the drain's bound
