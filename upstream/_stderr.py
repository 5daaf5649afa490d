"""A stdio upstream's stderr, read line by line and handed to a callback — never copied raw.

The child gets the write end of a pipe as its stderr; a task reads the read end without blocking the
event loop, splits lines, decodes them as UTF-8 with replacement, and passes each to the callback the
embedding application gave (the gateway redacts and logs it as a structured record). Lines are bounded
in length (longer ones are cut, `truncated`) and in rate (a token bucket; lines beyond it are counted,
and the count is reported with the next line that passes, `dropped_before`). Reading never stops while
the child runs, so a chatty child cannot block on a full pipe.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Final, TextIO

import anyio

__all__ = ["MAX_LINE_BYTES", "StderrCallback", "StderrLine", "stderr_pipe"]

logger = logging.getLogger("upstream.stderr")

MAX_LINE_BYTES: Final = 4096
LINES_PER_S: Final = 20.0
BURST: Final = 200
_READ_CHUNK: Final = 65536
_DRAIN_S: Final = 0.5
"""After the transport closed, how long the reader keeps going for the last lines (bounded: a
descendant that escaped the kill may hold the pipe open)."""


@dataclass(frozen=True)
class StderrLine:
    upstream: str
    text: str
    """One line, decoded with replacement, without its line end; at most MAX_LINE_BYTES of input."""
    truncated: bool = False
    dropped_before: int = 0
    """Lines dropped by the rate bound since the previous line that was passed on."""


StderrCallback = Callable[[StderrLine], None]


def log_stderr(line: StderrLine) -> None:
    """The default callback: the standard-library logger ``upstream.stderr`` at INFO."""
    logger.info("upstream %r stderr: %s", line.upstream, line.text, extra={"truncated": line.truncated})


class _Lines:
    def __init__(self, upstream: str, emit: StderrCallback) -> None:
        self._upstream = upstream
        self._emit = emit
        self._buf = bytearray()
        self._discarding = False
        self._tokens = float(BURST)
        self._stamp = anyio.current_time()
        self._dropped = 0

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        while True:
            end = self._buf.find(b"\n")
            if end < 0:
                break
            line = bytes(self._buf[:end])
            del self._buf[: end + 1]
            if self._discarding:
                self._discarding = False  # the rest of a cut line
                continue
            self._line(line, truncated=False)
        if len(self._buf) > MAX_LINE_BYTES:
            if not self._discarding:
                self._line(bytes(self._buf[:MAX_LINE_BYTES]), truncated=True)
                self._discarding = True
            self._buf.clear()

    def flush(self) -> None:
        if self._buf and not self._discarding:
            self._line(bytes(self._buf), truncated=False)
        self._buf.clear()

    def _line(self, raw: bytes, *, truncated: bool) -> None:
        now = anyio.current_time()
        self._tokens = min(float(BURST), self._tokens + (now - self._stamp) * LINES_PER_S)
        self._stamp = now
        if self._tokens < 1.0:
            self._dropped += 1
            return
        self._tokens -= 1.0
        text = raw.decode("utf-8", "replace").rstrip("\r")
        dropped, self._dropped = self._dropped, 0
        try:
            self._emit(StderrLine(self._upstream, text, truncated=truncated, dropped_before=dropped))
        except Exception:  # boundary: a faulty callback must not stop the reader (the child would block)
            logger.exception("upstream %r: stderr callback raised", self._upstream)


async def _pump(fd: int, lines: _Lines, done: anyio.Event) -> None:
    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not chunk:
                break
            lines.feed(chunk)
        lines.flush()
    finally:
        done.set()


class StderrSink:
    """The child's end of the pipe (`file`, for `stdio_client(errlog=...)`), closed in this process
    once the child has it (`spawned`), so the reader sees end-of-file when the child's side closes."""

    def __init__(self, write_fd: int) -> None:
        self.file: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", closefd=True)

    def spawned(self) -> None:
        with suppress(OSError):
            self.file.close()


@asynccontextmanager
async def stderr_pipe(upstream: str, on_line: StderrCallback | None) -> AsyncIterator[StderrSink]:
    """A pipe whose read end is pumped line by line into ``on_line`` while the context is open."""
    read_fd, write_fd = os.pipe()
    sink: StderrSink | None = None
    try:
        os.set_blocking(read_fd, False)
        sink = StderrSink(write_fd)
        lines = _Lines(upstream, on_line or log_stderr)
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump, read_fd, lines, done)
            try:
                yield sink
            finally:
                sink.spawned()
                with anyio.CancelScope(shield=True), anyio.move_on_after(_DRAIN_S):
                    await done.wait()
                tg.cancel_scope.cancel()
    finally:
        if sink is None:
            os.close(write_fd)
        else:
            sink.spawned()
        os.close(read_fd)
