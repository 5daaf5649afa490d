"""Supervised local processes: every child runs in its own session and its whole process group is reaped.

:func:`supervised_child` is the one way remoteops starts a long- or short-lived child (masters, agent
channels, one-shot ssh clients; forwards and transfers next)::

    async with supervised_child(argv, stdin=PIPE) as proc:
        ...  # talk to it
    # here the leader and every member of its process group are gone (or were sent SIGKILL) and reaped

On leaving the context — normally, by an exception or by cancellation — the group gets SIGTERM, a bounded
wait follows (for the leader, then for the rest of the group), whatever remains gets SIGKILL, and the
leader is reaped; all of it shielded and bounded. The model is the MCP SDK's POSIX process-tree termination
(``mcp/os/posix/utilities.py``): the leader's pid is the group id (``start_new_session``), ``killpg``
reaches members whose parent already exited, and only ESRCH proves a group gone. One difference: members
orphaned to a PID 1 that never reaps stay zombies and keep a group "alive" for ``killpg(pgid, 0)``; on
Linux a group whose remaining members are all zombies counts as gone (they cannot run any more).
Daemonizers that left the group (``setsid``) escape by design; remote descendants are the agent's job.

:func:`run_process` runs argv to completion on top of it, feeding stdin and capturing bounded output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from remoteops._capture import HeadTail

__all__ = [
    "ProcessOutcome",
    "StdinFeeder",
    "drop_unwritten_stdin",
    "group_alive",
    "run_process",
    "spawn",
    "supervised_child",
    "terminate_group",
]

_TERM_GRACE_S = 2.0
_KILL_WAIT_S = 5.0
_GROUP_POLL_S = 0.01  # between SIGTERM and SIGKILL there is no event for "the group is empty": probe it
_DRAIN_AFTER_EXIT_S = 2.0  # a grandchild may hold our pipes open after the process itself exited
_CHUNK = 65536
_PIPE = subprocess.PIPE
_DEVNULL = subprocess.DEVNULL

StdinFeeder = Callable[[anyio.abc.ByteSendStream], Coroutine[Any, Any, None]]
"""Writes a process's stdin itself (and closes it), e.g. only after a prompt appeared on stderr."""


@dataclass
class ProcessOutcome:
    returncode: int
    stdout: HeadTail
    stderr: HeadTail
    duration_s: float


def _only_zombies_left(pgid: int) -> bool:
    """Linux: True when no member of the group is in a runnable state (all zombies, or none found)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether any member of process group ``pgid`` can still run (signal 0; zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # EPERM never proves the group gone
    return not _only_zombies_left(pgid)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _until_group_gone(pgid: int) -> None:
    """Return once no member of the group can run; the caller's cancel scope bounds the wait."""
    for _probe in range(1_000_000):
        # one syscall when the group is gone; a /proc scan (off the loop) while it lingers
        if not _group_exists(pgid) or not await anyio.to_thread.run_sync(group_alive, pgid):
            return
        await anyio.sleep(_GROUP_POLL_S)


async def terminate_group(proc: anyio.abc.Process, *, grace_s: float = _TERM_GRACE_S) -> None:
    """SIGTERM the process group of ``proc`` → bounded wait → SIGKILL what remains → bounded wait until the
    whole group is gone → reap the leader and close its pipes.

    Shielded and bounded: safe to call from cancelled code and more than once."""
    pgid = proc.pid  # the leader's pid is the pgid (start_new_session); never getpgid() after reaping
    with anyio.CancelScope(shield=True):
        if _signal_group(pgid, signal.SIGTERM):
            gone = False
            with anyio.move_on_after(grace_s):
                await proc.wait()  # event-driven for the leader
                await _until_group_gone(pgid)
                gone = True
            if not gone and _signal_group(pgid, signal.SIGKILL):
                with anyio.move_on_after(_KILL_WAIT_S):  # SIGKILL is delivered asynchronously
                    await proc.wait()
                    await _until_group_gone(pgid)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # not in its group any more (cannot happen with setsid) or group gone: the pid
            with anyio.move_on_after(_KILL_WAIT_S):
                await proc.wait()
        drop_unwritten_stdin(proc)
        with anyio.move_on_after(_KILL_WAIT_S):
            await proc.aclose()  # closes the pipe transports too, not only the streams


def drop_unwritten_stdin(proc: anyio.abc.Process) -> None:
    """Discard what is still buffered for the stdin of a process that is gone. A pipe whose read end some
    other process still holds open (an ssh master the client passed it to) never drains: closing it would
    wait for that forever and leave its descriptor open. Aborting a transport with an empty buffer is not
    needed (its close is already complete or scheduled), so only a non-empty one is aborted."""
    transport = getattr(proc, "_transport", None)  # the asyncio backend's subprocess transport
    get_pipe = getattr(transport, "get_pipe_transport", None)
    pipe = get_pipe(0) if callable(get_pipe) else None
    if isinstance(pipe, asyncio.WriteTransport) and pipe.get_write_buffer_size() > 0:
        pipe.abort()


async def spawn(
    argv: Sequence[str],
    *,
    stdin: int = _DEVNULL,
    stdout: int = _PIPE,
    stderr: int = _PIPE,
    env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> anyio.abc.Process:
    """``anyio.open_process`` in its own session, shielded from cancellation once the fork may have happened.

    A cancel delivered while asyncio connects the pipes would otherwise leave a started child nobody owns
    (asyncio's own cleanup awaits the child and is itself cancelled again by anyio's level cancellation):
    cancellation is honoured before the spawn, never during it. The spawn itself is a bounded fork/exec."""
    await anyio.lowlevel.checkpoint_if_cancelled()
    with anyio.CancelScope(shield=True):
        proc = await anyio.open_process(
            list(argv),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,  # our signals only: a terminal Ctrl-C must not reach it behind our back
            **kwargs,
        )
    return proc


@contextlib.asynccontextmanager
async def supervised_child(
    argv: Sequence[str],
    *,
    stdin: int = _DEVNULL,
    stdout: int = _PIPE,
    stderr: int = _PIPE,
    env: Mapping[str, str] | None = None,
    grace_s: float = _TERM_GRACE_S,
) -> AsyncIterator[anyio.abc.Process]:
    """Start ``argv`` in its own session; on exit (any way) terminate and reap its whole process group."""
    proc = await spawn(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env)
    try:
        yield proc
    finally:
        await terminate_group(proc, grace_s=grace_s)


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
    argv: Sequence[str], *, stdin: bytes | StdinFeeder | None, stdout: HeadTail, stderr: HeadTail
) -> ProcessOutcome:
    """Run argv to completion. Cancellation (e.g. the caller's deadline) terminates and reaps the group.

    ``stdin``: bytes written and closed at once, a :data:`StdinFeeder` that writes it itself, or None."""
    started = time.monotonic()
    stdin_mode = _PIPE if stdin is not None else _DEVNULL
    async with supervised_child(argv, stdin=stdin_mode) as proc, anyio.create_task_group() as tg:
        drained = anyio.Event()

        async def drain_both() -> None:
            async with anyio.create_task_group() as inner:
                inner.start_soon(_drain, proc.stdout, stdout)
                inner.start_soon(_drain, proc.stderr, stderr)
            drained.set()

        tg.start_soon(drain_both)
        if callable(stdin):
            if proc.stdin is not None:
                tg.start_soon(stdin, proc.stdin)
        elif stdin is not None:
            tg.start_soon(_feed, proc.stdin, stdin)
        returncode = await proc.wait()
        with anyio.move_on_after(_DRAIN_AFTER_EXIT_S):
            await drained.wait()
        tg.cancel_scope.cancel()
    return ProcessOutcome(returncode, stdout, stderr, time.monotonic() - started)
