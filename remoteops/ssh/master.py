"""One OpenSSH ControlMaster, run as a supervised foreground child of ours."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from pathlib import Path

import anyio
import anyio.abc

from remoteops._capture import HeadTail
from remoteops._errors import AuthError, ConnectError, HostKeyError, TransportError
from remoteops._process import run_process, supervised_child, terminate_group
from remoteops._render import new_nonce
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.ssh.args import SshArgs, classify_ssh_failure, tail_lines

__all__ = ["Master", "connect_now", "mux_alive_check"]

_CONTROL_S = 5.0

# OpenSSH's multiplexing protocol (PROTOCOL.mux): uint32-length-framed packets of uint32 fields.
_MUX_MSG_HELLO = 0x00000001
_MUX_VERSION = 4
_MUX_C_ALIVE_CHECK = 0x10000004
_MUX_S_ALIVE = 0x80000005
_MUX_MAX_PACKET = 256 * 1024


async def _read_packet(stream: anyio.abc.ByteStream) -> bytes:
    buf = b""
    while len(buf) < 4:
        buf += await stream.receive(4 - len(buf))
    (length,) = struct.unpack(">I", buf)
    if not 4 <= length <= _MUX_MAX_PACKET:
        raise ValueError(f"bad mux packet length {length}")
    body = b""
    while len(body) < length:
        body += await stream.receive(length - len(body))
    return body


def _packet(*words: int) -> bytes:
    payload = struct.pack(f">{len(words)}I", *words)
    return struct.pack(">I", len(payload)) + payload


def connect_now(path: Path) -> socket.socket | None:
    """Connect to a unix socket without waiting: it completes at once or fails at once (``EAGAIN`` when the
    listener's backlog is full, i.e. nobody accepts), so it never blocks the event loop. (anyio's
    ``connect_unix`` retries ``EAGAIN`` in a loop that spins a core until its deadline.)"""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.connect(str(path))
    except OSError:  # incl. BlockingIOError (backlog full), refused, missing
        sock.close()
        return None
    return sock


async def mux_alive_check(control_path: Path) -> int | None:
    """The exchange ``ssh -O check`` makes (hello, MUX_C_ALIVE_CHECK -> MUX_S_ALIVE), done in-process:
    a full round trip through the master's mux loop without starting a process. Returns the master's pid,
    or None when the socket does not answer as a live master. Unbounded: the caller holds the deadline."""
    sock = connect_now(control_path)
    if sock is None:
        return None
    try:
        stream = await anyio.abc.UNIXSocketStream.from_socket(sock)
    except (OSError, ValueError):
        sock.close()
        return None
    request_id = int.from_bytes(os.urandom(4), "big")
    try:
        async with stream:
            await stream.send(_packet(_MUX_MSG_HELLO, _MUX_VERSION))
            hello = await _read_packet(stream)
            if struct.unpack_from(">I", hello)[0] != _MUX_MSG_HELLO:
                return None
            await stream.send(_packet(_MUX_C_ALIVE_CHECK, request_id))
            reply = await _read_packet(stream)
            if len(reply) < 12:
                return None
            kind, echoed, pid = struct.unpack_from(">III", reply)
            if kind != _MUX_S_ALIVE or echoed != request_id:
                return None
            return int(pid)
    except (OSError, ValueError, struct.error, anyio.EndOfStream, anyio.BrokenResourceError):
        return None


class Master:
    def __init__(self, key: str, target: TargetSpec, control_path: Path, settings: TransportSettings) -> None:
        self.key = key
        self.target = target
        self.control_path = control_path
        self._settings = settings
        self._args = SshArgs(settings)
        self.proc: anyio.abc.Process | None = None
        self.pid: int | None = None
        self.adopted = False
        self.active = 0
        self.last_used = time.monotonic()
        self.last_checked = time.monotonic()
        self.stderr = HeadTail(0, 4096)
        self._exited = anyio.Event()

    @property
    def alive(self) -> bool:
        """Cheap liveness, never waiting: our child has not exited and its socket takes a connection now.

        Safe on the event loop. A socket that takes connections but never answers passes; :meth:`check`
        (a bounded mux round trip) is what tells such a master apart."""
        if self.proc is not None and self.proc.returncode is not None:
            return False
        return self.socket_accepts()

    def socket_accepts(self) -> bool:
        """Whether the control socket takes a connection right now (:func:`connect_now`; never waits)."""
        sock = connect_now(self.control_path)
        if sock is None:
            return False
        sock.close()
        return True

    async def check(self) -> bool:
        """What ``ssh -O check`` checks (a full round trip through the master's mux protocol), in-process."""
        pid: int | None = None
        with anyio.move_on_after(_CONTROL_S):
            pid = await mux_alive_check(self.control_path)
        self.last_checked = time.monotonic()
        if pid is None:
            return False
        if self.pid is None:
            self.pid = pid
        return True

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start the master; return once its control socket listens. Raises from the exception tree."""
        token = f"rog-ready-{new_nonce()}"
        argv = self._args.master(self.target, self.control_path, token)
        await task_group.start(self._run, argv, token)
        self.last_used = self.last_checked = time.monotonic()

    async def _run(
        self,
        argv: list[str],
        token: str,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The master's whole life as a supervised child: wait for readiness, then drain and reap it."""
        ready = False
        try:
            async with supervised_child(argv) as proc:
                self.proc, self.pid = proc, proc.pid
                with anyio.move_on_after(self._settings.connect_timeout_s + 5):
                    ready = await self._read_token(proc, token)
                if ready:
                    task_status.started()
                    await self._supervise(proc)
                else:
                    with anyio.move_on_after(2):
                        await self._drain(proc.stderr)
            if not ready:
                raise self._startup_error(proc.returncode)
        finally:
            self._exited.set()

    def _startup_error(self, returncode: int | None) -> TransportError:
        stderr = self.stderr.tail.decode(errors="replace")
        error = classify_ssh_failure(stderr, target=self.target.name, stage="master", command_started=False)
        if isinstance(error, HostKeyError | AuthError | ConnectError):
            return error
        detail = tail_lines(stderr) or f"ssh master exited with {returncode}"
        return ConnectError(detail, target=self.target.name, stage="master", reason="multiplex")

    async def _read_token(self, proc: anyio.abc.Process, token: str) -> bool:
        if proc.stdout is None:
            return False
        seen = b""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._drain, proc.stderr)
            try:
                while token.encode() not in seen:
                    seen = (seen + await proc.stdout.receive(4096))[-4096:]
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                tg.cancel_scope.cancel()
                return False
            tg.cancel_scope.cancel()
        return True

    async def _drain(self, stream: anyio.abc.ByteReceiveStream | None) -> None:
        if stream is None:
            return
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                self.stderr.feed(await stream.receive(4096))

    async def _supervise(self, proc: anyio.abc.Process) -> None:
        """Drain the master's output for its whole life (the supervised child context reaps it)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._drain, proc.stderr)
            tg.start_soon(self._drain, proc.stdout)
            await proc.wait()
            tg.cancel_scope.cancel()

    async def close(self) -> None:
        """``ssh -O exit``, then make sure our child is gone and the socket removed. Shielded and bounded."""
        with anyio.CancelScope(shield=True):
            if self.proc is None or self.proc.returncode is None:
                with anyio.move_on_after(_CONTROL_S):
                    await run_process(
                        self._args.control(self.target, self.control_path, "exit"),
                        stdin=None,
                        stdout=HeadTail(4096, 0),
                        stderr=HeadTail(4096, 0),
                    )
            if self.proc is not None:
                with anyio.move_on_after(_CONTROL_S):
                    await self._exited.wait()
                await terminate_group(self.proc)
            if not self.socket_accepts():
                with contextlib.suppress(FileNotFoundError):
                    self.control_path.unlink()
