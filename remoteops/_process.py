"""Supervised local processes: feed stdin, capture bounded output, and always reap (on cancellation too)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import anyio.abc

from ._capture import HeadTail

__all__ = ["ProcessOutcome", "reap", "run_process"]

_TERM_GRACE_S = 2.0
_KILL_WAIT_S = 5.0
_DRAIN_AFTER_EXIT_S = 2.0  # a grandchild may hold our pipes open after the process itself exited
_CHUNK = 65536


@dataclass
class ProcessOutcome:
    returncode: int
    stdout: HeadTail
    stderr: HeadTail
    duration_s: float


async def reap(proc: anyio.abc.Process) -> None:
    """terminate -> bounded wait -> kill -> reap. Shielded: safe to call from cancelled code."""
    with anyio.CancelScope(shield=True):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with anyio.move_on_after(_TERM_GRACE_S):
                await proc.wait()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with anyio.move_on_after(_KILL_WAIT_S):
                await proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with anyio.move_on_after(1):
                    await stream.aclose()


async def _drain(stream: anyio.abc.ByteReceiveStream | None, sink: HeadTail) -> None:
    if stream is None:
        return
    try:
        while True:
            sink.feed(await stream.receive(_CHUNK))
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        return


async def _feed(stream: anyio.abc.ByteSendStream | None, data: bytes) -> None:
    if stream is None:
        return
    try:
        view = memoryview(data)
        for offset in range(0, len(view), _CHUNK):
            await stream.send(bytes(view[offset : offset + _CHUNK]))
        await stream.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        return  # the far side did not read all of stdin; not an error of ours


async def run_process(
    argv: Sequence[str], *, stdin: bytes | None, stdout: HeadTail, stderr: HeadTail
) -> ProcessOutcome:
    """Run argv to completion. Cancellation (e.g. the caller's deadline) terminates and reaps the process."""
    started = time.monotonic()
    proc = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # our signals only: a terminal Ctrl-C must not reach ssh behind our back
    )
    try:
        async with anyio.create_task_group() as tg:
            drained = anyio.Event()

            async def drain_both() -> None:
                async with anyio.create_task_group() as inner:
                    inner.start_soon(_drain, proc.stdout, stdout)
                    inner.start_soon(_drain, proc.stderr, stderr)
                drained.set()

            tg.start_soon(drain_both)
            if stdin is not None:
                tg.start_soon(_feed, proc.stdin, stdin)
            returncode = await proc.wait()
            with anyio.move_on_after(_DRAIN_AFTER_EXIT_S):
                await drained.wait()
            tg.cancel_scope.cancel()
    except BaseException:
        await reap(proc)
        raise
    await reap(proc)
    return ProcessOutcome(returncode, stdout, stderr, time.monotonic() - started)
