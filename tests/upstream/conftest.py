"""Real-process fixtures for the upstream tests: the fault-injecting MCP server over HTTP and stdio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from acceptance.harness import starts
from tests.fixtures.procs import free_port, stop_process, wait_for_port
from upstream import UpstreamSettings

FAULT_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "fault_upstream.py"

FAST_BACKOFF: dict[str, Any] = {
    "backoff_initial_s": 0.05,
    "backoff_max_s": 0.3,
    "backoff_multiplier": 2.0,
    "connect_timeout_s": 5.0,
    "call_wait_s": 5.0,  # the gateway tests' outage cases rely on it: an unavailable answer within seconds
}
# A stdio fault upstream is a new Python with the MCP SDK's imports: 2-3 s here, 7-10 s beside CPU hogs on
# this 2-core machine. A connect_timeout_s below that kills it mid-import on every attempt, and a call_wait_s
# below it fails the first call (or the first after a restart). Ceilings: a test about a bound sets its own.
STDIO_START: dict[str, Any] = {"connect_timeout_s": 60.0, "call_wait_s": 60.0}


@starts("fault")
class FaultServer:
    """The fault upstream over streamable HTTP on a fixed port, restartable on that port."""

    def __init__(self, state_dir: Path, port: int, page_size: int = 4) -> None:
        self.state_dir = state_dir
        self.port = port
        self.page_size = page_size
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}/mcp"

    def spawn(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, str(FAULT_SERVER), "--state-dir", str(self.state_dir)]
        argv += ["--http", str(self.port), "--page-size", str(self.page_size)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return self.proc

    async def start(self) -> None:
        await wait_for_port(self.port, self.spawn())

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def counts(self) -> dict[str, int]:
        path = self.state_dir / "counts.json"
        data: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
        return data

    async def control(self, method: str, path: str, **params: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=90) as client:
            return await client.request(method, path, params=params)

    async def wait_standalone_stream(self) -> None:
        """Until a client session's standalone GET stream is open: a notification that belongs to no
        request (list_changed, resources/updated) is dropped by the server while it is not, and the
        client opens it in the background after the handshake."""
        response = await self.control("GET", "/control/standalone")
        assert response.json() == {"standalone": True}

    async def kill_via_control(self) -> None:
        """Ask the server to exit right after answering, then reap it."""
        response = await self.control("POST", "/control/kill")
        assert response.status_code == 200
        assert self.proc is not None
        await anyio.to_thread.run_sync(self.proc.wait, 10)  # reap; the exit is already decided

    def settings(self, **overrides: Any) -> UpstreamSettings:
        values: dict[str, Any] = {"name": "fault", "transport": "http", "url": self.url, **FAST_BACKOFF}
        values.update(overrides)
        return UpstreamSettings(**values)


@starts("fault")
@asynccontextmanager
async def running_fault(state_dir: Path) -> AsyncIterator[FaultServer]:
    """The fault upstream over HTTP on a free port, started (port open) and stopped and reaped afterwards."""
    server = FaultServer(state_dir, free_port())
    await server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def fault_http(tmp_path: Path) -> AsyncIterator[FaultServer]:
    async with running_fault(tmp_path) as server:
        yield server


@starts("fault")
class StdioFault:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def settings(self, **overrides: Any) -> UpstreamSettings:
        values: dict[str, Any] = {
            "name": "fault-stdio",
            "transport": "stdio",
            "command": [sys.executable, str(FAULT_SERVER), "--state-dir", str(self.state_dir), "--stdio"],
            **FAST_BACKOFF,
            **STDIO_START,
        }
        values.update(overrides)
        return UpstreamSettings(**values)

    def pid(self) -> int:
        return int((self.state_dir / "pid").read_text())

    def kill(self) -> int:
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def counts(self) -> dict[str, int]:
        path = self.state_dir / "counts.json"
        data: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
        return data


@pytest.fixture
def fault_stdio(tmp_path: Path) -> StdioFault:
    return StdioFault(tmp_path)
