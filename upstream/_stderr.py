"""A stdio upstream's stderr, read line by line and handed to a callback — never copied raw.

The child gets the write end of a pipe as its stderr; a task reads the read end without blocking the
event loop, splits lines, decodes them as UTF-8 with replacement, and passes each to the callback the
embedding application gave (the gateway redacts and logs it as a structured record). Blank lines are
dropped; a line that continues the one before it (indented: a wrapped log message, a traceback's frames;
or the inside of a box drawn with box-drawing characters, such as a start-up banner) joins it in one
record (`lines` > 1, the text joined with newlines), within one read and at most `MAX_GROUP_LINES`. Lines
are bounded in length (longer ones are cut, `truncated`) and records in rate (a token bucket; records
beyond it are counted, and the count is reported with the next one that passes, `dropped_before`).
Reading never stops while the child runs, so a chatty child cannot block on a full pipe.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Final, TextIO

import anyio

__all__ = ["MAX_LINE_BYTES", "StderrCallback", "StderrLine", "read_chunks", "stderr_pipe", "stderr_reader"]

logger = logging.getLogger("upstream.stderr")

MAX_LINE_BYTES: Final = 4096
MAX_GROUP_LINES: Final = 64
"""At most this many continuation lines in one record (the next starts a new one)."""
_BOX: Final = range(0x2500, 0x2580)
"""Box-drawing characters: a banner's frame."""
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
    """One line, decoded with replacement, without its line end; at most MAX_LINE_BYTES of input per line
    (``lines`` > 1: a line and its continuation lines, joined with newlines)."""
    truncated: bool = False
    dropped_before: int = 0
    """Records dropped by the rate bound since the previous one that was passed on."""
    lines: int = 1


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
        self._group: list[str] = []
        self._group_truncated = False

    def feed(self, chunk: bytes) -> None:
        self._split(chunk)
        self._end_group()  # a record never waits for the next read

    def _split(self, chunk: bytes) -> None:
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
            self._line(line[:MAX_LINE_BYTES], truncated=len(line) > MAX_LINE_BYTES)
        if len(self._buf) > MAX_LINE_BYTES:
            if not self._discarding:
                self._line(bytes(self._buf[:MAX_LINE_BYTES]), truncated=True)
                self._discarding = True
            self._buf.clear()

    def flush(self) -> None:
        if self._buf and not self._discarding:
            self._line(bytes(self._buf), truncated=False)
        self._buf.clear()
        self._end_group()

    def _line(self, raw: bytes, *, truncated: bool) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            return  # blank: nothing to read in it
        if not (self._group and len(self._group) < MAX_GROUP_LINES and _continues(self._group[0], text)):
            self._end_group()
        self._group.append(text)
        self._group_truncated = self._group_truncated or truncated

    def _end_group(self) -> None:
        if not self._group:
            return
        text, count, truncated = "\n".join(self._group), len(self._group), self._group_truncated
        self._group, self._group_truncated = [], False
        now = anyio.current_time()
        self._tokens = min(float(BURST), self._tokens + (now - self._stamp) * LINES_PER_S)
        self._stamp = now
        if self._tokens < 1.0:
            self._dropped += 1
            return
        self._tokens -= 1.0
        dropped, self._dropped = self._dropped, 0
        line = StderrLine(self._upstream, text, truncated=truncated, dropped_before=dropped, lines=count)
        try:
            self._emit(line)
        except Exception:  # boundary: a faulty callback must not stop the reader (the child would block)
            logger.exception("upstream %r: stderr callback raised", self._upstream)


def _continues(first: str, line: str) -> bool:
    """Whether ``line`` belongs to the record that ``first`` began (indented, or inside a drawn box)."""
    if line[0] in " \t":
        return True
    return ord(first[0]) in _BOX and ord(line[0]) in _BOX and first[0] not in "│┃"


async def read_chunks(fd: int) -> AsyncIterator[bytes]:
    """What a non-blocking pipe's read end gives, chunk by chunk, until end-of-file or a read error."""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            return
        if not chunk:
            return
        yield chunk


async def _pump(fd: int, lines: _Lines, done: anyio.Event) -> None:
    try:
        async for chunk in read_chunks(fd):
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
        sink = StderrSink(write_fd)
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    try:
        async with stderr_reader(upstream, on_line, read_fd):
            try:
                yield sink
            finally:
                sink.spawned()
    finally:
        sink.spawned()


@asynccontextmanager
async def stderr_reader(upstream: str, on_line: StderrCallback | None, read_fd: int) -> AsyncIterator[None]:
    """Pump ``read_fd`` (the read end of a child's stderr pipe, owned and closed here) line by line into
    ``on_line`` while the context is open, and for the last lines after it (bounded)."""
    try:
        os.set_blocking(read_fd, False)
        lines = _Lines(upstream, on_line or log_stderr)
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump, read_fd, lines, done)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_DRAIN_S):
                    await done.wait()
                tg.cancel_scope.cancel()
    finally:
        os.close(read_fd)
