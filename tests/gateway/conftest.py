"""In-process gateway fixtures: a runtime on a temporary state directory and an MCP client on it; the
fault-injecting upstream over HTTP for the relay tests."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from gateway._catalog import AnySpec
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.upstream.conftest import FaultServer, running_fault

ClientFactory = Callable[..., AbstractAsyncContextManager[tuple[Client, Runtime]]]


def _runqueue_wait_s() -> float | None:
    """How long this thread has been runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class LoopTicker:
    """Wakes every ``period_s`` on the event loop and records the largest gap between two wake-ups, and the
    largest *stall*: that gap less the time the loop's thread spent waiting for a CPU meanwhile (Linux
    schedstat; the plain gap where it cannot be read). A loop blocked in a syscall or busy on the CPU stalls;
    a loop that is ready but not scheduled on a loaded machine (CI) does not: that wait is the machine's,
    not the code's. ``last_tick`` is the monotonic time of the latest wake-up, None before the first (other
    threads may read it)."""

    def __init__(self, period_s: float = 0.01) -> None:
        self.period_s = period_s
        self.max_gap = 0.0
        self.max_stall = 0.0
        self.last_tick: float | None = None

    async def run(self) -> None:
        last, waited = time.monotonic(), _runqueue_wait_s()
        self.last_tick = last
        while True:
            await anyio.sleep(self.period_s)
            now, waited_now = time.monotonic(), _runqueue_wait_s()
            gap = now - last
            starved = waited_now - waited if waited is not None and waited_now is not None else 0.0
            self.max_gap = max(self.max_gap, gap)
            self.max_stall = max(self.max_stall, gap - starved)
            last, waited = now, waited_now
            self.last_tick = now


async def read_audit(rt: Runtime) -> str:
    """The audit file's text once every record handed to the (asynchronous) writer is on disk (bounded)."""
    with anyio.fail_after(10):
        await rt.audit.flush()
    return rt.settings.audit_path.read_text(encoding="utf-8")


@pytest.fixture
def gateway_client(tmp_path: Path) -> ClientFactory:
    """``async with gateway_client(extra_specs=..., **settings) as (client, runtime)``."""

    @asynccontextmanager
    async def factory(
        extra_specs: Sequence[AnySpec] = (),
        secrets: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
        **settings: Any,
    ) -> AsyncIterator[tuple[Client, Runtime]]:
        cfg = Settings.model_validate({"state_dir": str(tmp_path / "state"), **settings})
        specs = [*all_specs(), *extra_specs]
        async with Runtime(cfg, specs, redactor=Redactor(secrets), clock=clock) as rt:
            server = build_server(rt, stdio_principal="test")
            async with Client(server, mode="legacy") as client:
                yield client, rt

    return factory


@pytest.fixture
async def fault(tmp_path: Path) -> AsyncIterator[FaultServer]:
    """The fault upstream over HTTP, its state under ``tmp_path / "fault"``."""
    state = tmp_path / "fault"
    state.mkdir()
    async with running_fault(state) as server:
        yield server
