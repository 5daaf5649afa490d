"""Real-process fixtures for the upstream tests: the fault-injecting MCP server over HTTP and stdio."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
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
_ZYGOTE = FAULT_SERVER.with_name("fault_zygote.py")
_LAUNCH = FAULT_SERVER.with_name("fault_launch.py")
_zygote: tuple[subprocess.Popen[bytes], Path] | None = None


def _stop_zygote() -> None:
    global _zygote
    if _zygote is None:
        return
    proc, work = _zygote
    _zygote = None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the zygote and every upstream it forked that is still running
    proc.wait(timeout=10)
    shutil.rmtree(work, ignore_errors=True)


def _zygote_socket() -> Path:
    """This process's fault-upstream fork server (tests/fixtures/fault_zygote.py), started on first use and
    stopped (with its process group) when the process exits."""
    global _zygote
    if _zygote is not None and _zygote[0].poll() is None:
        return _zygote[1] / "z.sock"
    _stop_zygote()
    work = Path(tempfile.mkdtemp(prefix="rogz-", dir="/tmp"))  # an AF_UNIX path must stay under 108 bytes
    proc = subprocess.Popen(
        [sys.executable, str(_ZYGOTE), str(work / "z.sock")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    _zygote = (proc, work)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)  # its imports: ~1 s, far more on a loaded machine
    if not ready or proc.stdout.readline() != b"ready\n":
        _stop_zygote()
        raise RuntimeError("the fault upstream's fork server did not start")
    proc.stdout.close()
    atexit.register(_stop_zygote)
    return work / "z.sock"


@starts("fault")
def fault_command(*args: str) -> list[str]:
    """The argv that starts one fault upstream with ``args`` (``--state-dir DIR --stdio`` …): a tiny
    stdlib launcher whose upstream is forked by this process's zygote, the SDK's imports already done (a
    fault upstream started as ``python fault_upstream.py`` spends ~0.75 s of CPU importing, and the fast
    tier starts about a hundred). To whoever starts it, the launcher is the upstream: same stdio, its exit
    and death by signal mirrored, signals passed on, ``DIR/pid`` the real server's pid."""
    return [sys.executable, "-I", "-S", str(_LAUNCH), str(_zygote_socket()), *args]


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

    def __init__(self, state_dir: Path, port: int, page_size: int = 4, extra: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.port = port
        self.page_size = page_size
        self.extra = extra
        """More fault upstream arguments (``--tasks`` …)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}/mcp"

    def spawn(self) -> subprocess.Popen[bytes]:
        argv = fault_command("--state-dir", str(self.state_dir), "--http", str(self.port))
        argv += ["--page-size", str(self.page_size), *self.extra]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return self.proc

    async def start(self) -> None:
        await wait_for_port(self.port, self.spawn())

    def server_pid(self) -> int:
        """The server process's own pid (it writes DIR/pid before it listens; ``proc`` is its launcher)."""
        return int((self.state_dir / "pid").read_text())

    def kill(self) -> None:
        """SIGKILL the server itself (its launcher mirrors the death), then reap: the port is free after."""
        if self.proc is not None:
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
                os.kill(self.server_pid(), signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)  # the launcher ends once the zygote has reaped the server
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
async def running_fault(state_dir: Path, *extra: str) -> AsyncIterator[FaultServer]:
    """The fault upstream over HTTP on a free port, started (port open) and stopped and reaped afterwards;
    ``extra``: more of its arguments (``--tasks`` …)."""
    server = FaultServer(state_dir, free_port(), extra=extra)
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
            "command": fault_command("--state-dir", str(self.state_dir), "--stdio"),
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
