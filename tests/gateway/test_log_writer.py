"""Log lines are handed to one writer thread: the event loop never waits for stderr, lines keep their order,
what a full queue drops is counted in a later line, and stopping writes what is queued.

The last test is the case that needs it: a stdio client that never reads the gateway's stderr (the pipe
fills at 64 KiB) must still get every answer."""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from gateway._logging import LogWriter, _Handoff
from tests.fixtures.gateway_proc import write_config


class _Stuck(logging.Handler):
    """A stderr that takes nothing until ``opened`` is set, then keeps every line."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = threading.Event()
        self.entered = threading.Event()
        self.lines: list[str] = []
        self._wrote = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        self.entered.set()
        self.opened.wait(30)
        with self._wrote:
            self.lines.append(record.getMessage())
            self._wrote.notify_all()

    def wait_for(self, count: int) -> None:
        with self._wrote:
            assert self._wrote.wait_for(lambda: len(self.lines) >= count, timeout=10)


def _record(n: int) -> logging.LogRecord:
    return logging.makeLogRecord({"name": "gateway.test", "levelno": logging.INFO, "msg": f"line {n}"})


@pytest.mark.unit
def test_a_stuck_stderr_never_holds_the_caller_and_what_was_dropped_is_counted_in_order() -> None:
    stuck = _Stuck()
    handoff = _Handoff(queue.Queue(8))
    writer = LogWriter(handoff, stuck, stop_timeout_s=10)
    try:
        handoff.handle(_record(0))
        assert stuck.entered.wait(10)  # the writer holds line 0 in the stuck write
        started = time.monotonic()
        for n in range(1, 40):  # the queue takes 8 more: the rest cannot wait anywhere
            handoff.handle(_record(n))
        handed_over_s = time.monotonic() - started
        assert handoff.dropped == 40 - 9
        stuck.opened.set()
        stuck.wait_for(9)  # the queue is empty again
        handoff.handle(_record(40))  # the first line that finds room again carries the count
    finally:
        stuck.opened.set()
        writer.stop()
    assert handed_over_s < 5  # never waited for the stuck handler (it would have waited 30 s per line)
    kept = [int(line.split()[1]) for line in stuck.lines if line.startswith("line ")]
    assert kept == sorted(kept)
    assert kept[-1] == 40
    [note] = [line for line in stuck.lines if line.startswith("log_lines_dropped")]
    assert kept == [*range(9), 40]
    assert "31 line(s)" in note
    assert stuck.lines.index(note) == len(stuck.lines) - 1  # right after the line that found room
    assert handoff.dropped == 0


@pytest.mark.unit
def test_stopping_writes_every_queued_line_and_is_idempotent() -> None:
    slow = _Stuck()
    handoff = _Handoff(queue.Queue(100))
    writer = LogWriter(handoff, slow, stop_timeout_s=10)
    for n in range(50):
        handoff.handle(_record(n))
    slow.opened.set()
    writer.stop()
    writer.stop()
    assert slow.lines == [f"line {n}" for n in range(50)]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_stdio_client_that_never_reads_stderr_still_gets_every_answer(tmp_path: Path) -> None:
    settings = {"state_dir": str(tmp_path / "state"), "log_level": "debug"}
    cfg = write_config(tmp_path / "gateway.toml", settings)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(cfg), "serve", "--stdio"]
    )
    unread, errlog_fd = os.pipe()  # nobody ever reads ``unread``: the pipe is full after 64 KiB
    answered = 0
    try:
        with os.fdopen(errlog_fd, "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                with anyio.fail_after(120):
                    for _ in range(300):  # ~60 KiB of debug and canonical lines per 100 calls
                        result = await client.call_tool("gateway_health", {})
                        assert result.is_error is not True
                        answered += 1
        left = os.read(unread, 1 << 20)
    finally:
        os.close(unread)
    assert answered == 300
    assert len(left) >= 60_000  # the pipe did fill up: the gateway wrote until it could not


class _Broken(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        raise ValueError("cannot render")


@pytest.mark.unit
def test_a_line_the_handler_fails_on_is_reported_by_type_and_never_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    handoff = _Handoff(queue.Queue(8))
    writer = LogWriter(handoff, _Broken(), stop_timeout_s=10)
    secret_line = logging.makeLogRecord({"name": "gateway.t", "levelno": logging.INFO, "msg": "pw=hunter2"})
    handoff.handle(secret_line)
    handoff.handle(_record(1))
    writer.stop()  # the writer survived the first failure: it reached the sentinel after the second
    err = capsys.readouterr().err
    assert err.count('"log_line_lost"') == 2
    assert '"error": "ValueError"' in err
    assert "hunter2" not in err
