"""A stdio upstream process started before this package was imported, and its transport.

The embedding application may spawn a stdio upstream as soon as it has read its configuration, before its
own (and this package's) imports, so that the two start-ups overlap (the gateway does, in
``gateway._early``). It hands the live process over as a :class:`SpawnedProcess`; the supervisor's first
connection attempt talks to it through :func:`spawned_stdio` — the SDK's ``stdio_client`` for a process it
did not spawn: the same newline-delimited JSON-RPC, the same UTF-8 decoding with replacement, the same
shutdown (stdin closed, a grace period, then SIGTERM and SIGKILL to the process group, reaped), and the
child's stderr read line by line like any stdio upstream's (``upstream._stderr``). Every later attempt
spawns a fresh process as usual. A handed process that does not match the settings exactly (argv,
environment, working directory) is never used: :meth:`SpawnedProcess.discard` ends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from upstream._settings import UpstreamSettings
from upstream._stderr import StderrCallback, read_chunks, stderr_reader

__all__ = ["SpawnedProcess", "spawned_stdio"]

_GRACE_S: Final = 2.0  # as the SDK's stdio_client: after stdin closes, then after SIGTERM
_REAP_S: Final = 2.0  # after SIGKILL
_FLUSH_S, _POLL_S = 0.5, 0.01  # the writer's last messages; the exit poll
_WRITE_CHUNK: Final = 65536  # a pipe's capacity: a large message is never copied whole per write


@dataclass(eq=False)
class SpawnedProcess:
    """A live stdio upstream process: stdin and stdout pipes, stderr on a pipe whose read end is
    ``stderr_fd``, its own session (process group). ``argv``/``env``/``cwd`` are what it was started with
    (the full environment it got). Owned by whoever holds it: used once (:func:`spawned_stdio`) or ended
    (:meth:`discard`)."""

    process: subprocess.Popen[bytes]
    stderr_fd: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    spawned_at: float = field(default_factory=time.monotonic)
    taken: bool = False
    """A transport took it over (``spawned_stdio``): it stops the process, not ``discard``."""

    def matches(self, settings: UpstreamSettings) -> bool:
        """Whether these settings would have spawned exactly this process (as ``stdio_client`` does)."""
        return (
            settings.transport == "stdio"
            and tuple(settings.command) == self.argv
            and dict(self.env) == get_default_environment() | dict(settings.env)
            and (None if settings.cwd is None else str(settings.cwd)) == self.cwd
            and self.process.poll() is None
        )

    def discard(self) -> None:
        """End the process unused (blocking, bounded): SIGTERM to its group, SIGKILL after the grace
        period, reaped; its pipes closed."""
        proc = self.process
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                with suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_REAP_S)
        self.close_pipes()

    def close_pipes(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with suppress(OSError):
                    stream.close()
        with suppress(OSError):
            os.close(self.stderr_fd)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)  # its own session: the group id is its pid


async def _exited_within(proc: subprocess.Popen[bytes], limit_s: float) -> bool:
    """Poll for the exit (not ``wait()``: a descendant holding the pipes must not make it look hung)."""
    with anyio.move_on_after(limit_s):
        while proc.poll() is None:  # noqa: ASYNC110 - a Popen offers no event (the SDK polls too)
            await anyio.sleep(_POLL_S)
    return proc.poll() is not None


async def _stop(spawned: SpawnedProcess) -> None:
    """The SDK's shutdown sequence: stdin closed, grace period, SIGTERM to the group, SIGKILL, reaped."""
    proc = spawned.process
    if proc.stdin is not None:
        with suppress(OSError):
            proc.stdin.close()
    if not await _exited_within(proc, _GRACE_S):
        _signal_group(proc, signal.SIGTERM)
        if not await _exited_within(proc, _GRACE_S):
            _signal_group(proc, signal.SIGKILL)
            await _exited_within(proc, _REAP_S)


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        text = line.decode("utf-8", "replace")
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:  # handed to the session, as stdio_client does
        return exc


async def _write_all(fd: int, data: bytes) -> None:
    sent = 0
    while sent < len(data):
        try:
            sent += os.write(fd, data[sent : sent + _WRITE_CHUNK])
        except BlockingIOError:
            await anyio.wait_writable(fd)


@asynccontextmanager
async def spawned_stdio(
    spawned: SpawnedProcess, upstream: str, on_stderr: StderrCallback | None
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of a handed process, like ``stdio_client``'s; on exit the process
    is stopped and reaped whatever happened (shielded, bounded)."""
    proc = spawned.process
    if proc.stdin is None or proc.stdout is None:  # pragma: no cover - spawned with both pipes
        raise ValueError("a handed upstream process needs stdin and stdout pipes")
    spawned.taken = True
    stdin_fd, stdout_fd = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(stdin_fd, False)
    os.set_blocking(stdout_fd, False)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def read_stdout() -> None:
        """Lines to the session; once the session is gone, the rest is read and dropped (a child
        blocked on a full pipe could not see its stdin close)."""
        buffer = bytearray()
        deliver = True
        async with read_send:
            async for chunk in read_chunks(stdout_fd):
                if not deliver:
                    continue
                start = len(buffer)
                buffer += chunk
                end = buffer.find(b"\n", start)
                while end >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    try:
                        await read_send.send(_parse(line))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        deliver = False
                        buffer.clear()
                        break
                    end = buffer.find(b"\n")

    async def write_stdin() -> None:
        try:
            async with write_recv:
                async for message in write_recv:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await _write_all(stdin_fd, (json + "\n").encode("utf-8", "replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()  # the session sees the end instead of a request hanging forever
        finally:
            writer_done.set()

    try:
        async with stderr_reader(upstream, on_stderr, spawned.stderr_fd), anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(write_stdin)
            try:
                yield read_recv, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    read_recv.close()  # the reader drains from now on
                    write_send.close()
                    with anyio.move_on_after(_FLUSH_S):
                        await writer_done.wait()
                    await _stop(spawned)
                tg.cancel_scope.cancel()
    finally:
        for stream in (proc.stdin, proc.stdout):
            with suppress(OSError):
                stream.close()
        await anyio.lowlevel.cancel_shielded_checkpoint()
