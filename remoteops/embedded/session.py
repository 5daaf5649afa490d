"""One SSH session channel of the embedded target → one local subprocess.

The process factory of :class:`remoteops.embedded.target.EmbeddedTarget` hands every shell or exec request to
:func:`run_session`. Two carriers:

* **pipes** (no pty requested): ``/bin/sh -c <command>`` with stdin/stdout/stderr as pipes. The streams are
  copied by hand as raw bytes (``process.redirect()`` truncated large outputs), stdin EOF is propagated, and
  the exit status — or the killing signal — is reported once the command has exited *and* both output pipes
  reached EOF (as sshd does, so output is always complete).
* **pty** (``ssh -t``/``-tt``): a fresh pseudo-terminal sized as the client asked; the child becomes a
  session leader and acquires the pty as its controlling terminal, so job control, ``^C`` and ``/dev/tty``
  behave. Window changes are applied with ``TIOCSWINSZ`` (the kernel sends ``SIGWINCH``). Client EOF is
  ignored, as on a terminal. Terminal modes sent by the client are not applied (pty defaults).

Every child runs in its own session/process group. When the channel closes or the client disconnects before
the command finished, the whole group gets SIGHUP+SIGTERM, then SIGKILL after a short grace, and the child is
reaped. Background processes left behind by a command that exited normally are not touched (``nohup`` works,
as with sshd).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Mapping, Sequence
from pathlib import Path
from subprocess import PIPE

import anyio
import asyncssh
from anyio.abc import ByteReceiveStream, Process

from remoteops._process import drop_unwritten_stdin, spawn

__all__ = ["run_session"]

_CHUNK = 64 * 1024
_TERM_GRACE_S = 2.0
_KILL_WAIT_S = 5.0
_SHELL = "/bin/sh"
# Run as the session leader: opening the tty (without O_NOCTTY) makes it the controlling terminal; then exec.
_CTTY_TRAMPOLINE = 'exec 9<>"$1" && exec 9>&- && shift && exec "$@"'
_CLIENT_ENV_PREFIXES = ("LC_",)
_CLIENT_ENV_NAMES = frozenset({"LANG"})

SSHProcess = asyncssh.SSHServerProcess[bytes]


async def run_session(process: SSHProcess, *, sandbox: Path, base_env: Mapping[str, str]) -> None:
    """Serve one session channel until the command exits or the channel goes away."""
    if process.subsystem is not None:  # sftp is served by asyncssh itself; nothing else exists here
        process.stderr.write(f"subsystem {process.subsystem!r} is not supported\n".encode())
        process.exit(127)
        return
    command = process.command
    argv = [_SHELL] if command is None else [_SHELL, "-c", command]
    env = _session_env(process, base_env)
    if process.term_type is None:
        await _run_piped(process, argv, sandbox, env)
    else:
        await _run_pty(process, argv, sandbox, env)


def _spawn_failed(process: SSHProcess, exc: OSError) -> None:
    """The command could not start (no sandbox, no fds or ptys left): fail the channel, not the connection."""
    with contextlib.suppress(BrokenPipeError, ConnectionError):
        process.stderr.write(f"embedded target: cannot start command: {exc.strerror or exc}\n".encode())
    process.exit(127)


def _session_env(process: SSHProcess, base_env: Mapping[str, str]) -> dict[str, str]:
    env = dict(base_env)
    for name, value in process.env.items():  # like Debian's sshd: AcceptEnv LANG LC_*
        if isinstance(name, str) and isinstance(value, str) and _accepted_client_env(name):
            env[name] = value
    peer = process.get_extra_info("peername")
    local = process.get_extra_info("sockname")
    if peer and local:
        env["SSH_CONNECTION"] = f"{peer[0]} {peer[1]} {local[0]} {local[1]}"
        env["SSH_CLIENT"] = f"{peer[0]} {peer[1]} {local[1]}"
    return env


def _accepted_client_env(name: str) -> bool:
    return name in _CLIENT_ENV_NAMES or name.startswith(_CLIENT_ENV_PREFIXES)


def _report_exit(process: SSHProcess, returncode: int) -> None:
    if returncode >= 0:
        process.exit(returncode)
        return
    try:
        name = signal.Signals(-returncode).name.removeprefix("SIG")
    except ValueError:
        process.exit(128 + -returncode)
        return
    process.exit_with_signal(name)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _signal_from_name(name: str) -> int | None:
    try:
        return int(signal.Signals[f"SIG{name}"])
    except KeyError:
        return None


async def _finish(proc: Process, *, completed: bool) -> None:
    """Reap the child; if the session ended early, terminate → bounded wait → kill its whole process group."""
    with anyio.CancelScope(shield=True):
        if not completed:
            # The leader may already be reaped while group members live on: still signal the group (its id
            # stays reserved while any member exists).
            _signal_group(proc.pid, signal.SIGHUP)
            _signal_group(proc.pid, signal.SIGTERM)
            with anyio.move_on_after(_TERM_GRACE_S):
                await proc.wait()
            _signal_group(proc.pid, signal.SIGKILL)
        drop_unwritten_stdin(proc)  # a descendant may still hold the read end, never reading
        with anyio.move_on_after(_KILL_WAIT_S):
            await proc.aclose()


async def _cancel_when_closed(process: SSHProcess, scope: anyio.CancelScope) -> None:
    await process.channel.wait_closed()
    scope.cancel()


# ---------------------------------------------------------------------------------------------------- pipes


async def _run_piped(process: SSHProcess, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
    try:
        proc = await spawn(argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, cwd=cwd, env=env)
    except OSError as exc:
        _spawn_failed(process, exc)
        return
    returncode: int | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when_closed, process, tg.cancel_scope)
            tg.start_soon(_feed_stdin, process, proc)
            if proc.stdout is None or proc.stderr is None:  # pragma: no cover — opened with PIPE above
                raise RuntimeError("subprocess pipes missing")
            async with anyio.create_task_group() as out:
                out.start_soon(_copy_out, proc.stdout, process.stdout)
                out.start_soon(_copy_out, proc.stderr, process.stderr)
            returncode = await proc.wait()
            tg.cancel_scope.cancel()
    finally:
        await _finish(proc, completed=returncode is not None)
    if returncode is not None:
        _report_exit(process, returncode)


async def _feed_stdin(process: SSHProcess, proc: Process) -> None:
    sink = proc.stdin
    while True:
        try:
            data = await process.stdin.read(_CHUNK)
        except asyncssh.SignalReceived as exc:
            if (signum := _signal_from_name(exc.signal)) is not None:
                _signal_group(proc.pid, signum)
            continue
        except (asyncssh.TerminalSizeChanged, asyncssh.BreakReceived):
            continue
        if not data:
            break
        if sink is None:  # the command closed its stdin: keep the SSH window moving, drop the bytes
            continue
        try:
            await sink.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            sink = None
    if sink is not None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await sink.aclose()


async def _copy_out(source: ByteReceiveStream, sink: asyncssh.SSHWriter[bytes]) -> None:
    async for chunk in source:
        try:
            sink.write(chunk)
            await sink.drain()
        except (BrokenPipeError, ConnectionError):
            return  # the channel is closing; _cancel_when_closed tears the session down


# ------------------------------------------------------------------------------------------------------ pty


def _set_winsize(fd: int, size: tuple[int, int, int, int]) -> None:
    cols, rows, xpixels, ypixels = size
    if cols > 0 and rows > 0:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, xpixels, ypixels))


async def _run_pty(process: SSHProcess, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
    try:
        master, slave = os.openpty()
    except OSError as exc:
        _spawn_failed(process, exc)
        return
    try:
        tty_name = os.ttyname(slave)
        _set_winsize(master, process.term_size)
        os.set_blocking(master, False)
        env = {**env, "TERM": process.term_type or "dumb", "SSH_TTY": tty_name}
        proc = await spawn(
            [_SHELL, "-c", _CTTY_TRAMPOLINE, "sh", tty_name, *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
        )
    except OSError as exc:
        os.close(master)
        _spawn_failed(process, exc)
        return
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)  # the child has its own copies; EIO on the master then means "all closed"
    returncode: int | None = None
    try:
        pump = _PtyReader(master, process.stdout)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when_closed, process, tg.cancel_scope)
            tg.start_soon(_feed_pty, process, proc, master)
            async with anyio.create_task_group() as out:
                out.start_soon(pump.run)
                returncode = await proc.wait()
                pump.child_exited()
            tg.cancel_scope.cancel()
    finally:
        os.close(master)  # hangs up the terminal for anything still attached
        await _finish(proc, completed=returncode is not None)
    if returncode is not None:
        _report_exit(process, returncode)


class _PtyReader:
    """Copy pty output to the channel; after the child exits, drain what is buffered and stop."""

    def __init__(self, master: int, sink: asyncssh.SSHWriter[bytes]) -> None:
        self._master = master
        self._sink = sink
        self._exited = False
        self._wait_scope: anyio.CancelScope | None = None

    def child_exited(self) -> None:
        self._exited = True
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    async def run(self) -> None:
        while True:
            try:
                data = os.read(self._master, _CHUNK)
            except BlockingIOError:
                if self._exited:
                    return
                with anyio.CancelScope() as self._wait_scope:
                    await anyio.wait_readable(self._master)
                self._wait_scope = None
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # every slave fd is closed
                    return
                raise
            if not data:
                return
            try:
                self._sink.write(data)
                await self._sink.drain()
            except (BrokenPipeError, ConnectionError):
                return


async def _feed_pty(process: SSHProcess, proc: Process, master: int) -> None:
    while True:
        try:
            data = await process.stdin.read(_CHUNK)
        except asyncssh.TerminalSizeChanged as exc:
            _set_winsize(master, (exc.width, exc.height, exc.pixwidth, exc.pixheight))
            continue
        except asyncssh.SignalReceived as exc:
            if (signum := _signal_from_name(exc.signal)) is not None:
                _signal_group(proc.pid, signum)
            continue
        except asyncssh.BreakReceived:
            continue
        if not data:
            return  # EOF on a terminal session means nothing; the command decides when to end
        view = memoryview(data)
        while view:
            try:
                written = os.write(master, view)
            except BlockingIOError:
                await anyio.wait_writable(master)
                continue
            except OSError:
                return
            view = view[written:]
