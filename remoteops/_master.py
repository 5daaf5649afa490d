"""One OpenSSH ControlMaster, run as a supervised foreground child of ours."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
from pathlib import Path

import anyio
import anyio.abc

from ._capture import HeadTail
from ._errors import AuthError, ConnectError, HostKeyError, TransportError
from ._process import reap, run_process
from ._render import new_nonce
from ._settings import TargetSpec, TransportSettings
from ._sshargs import SshArgs, classify_ssh_failure

__all__ = ["Master"]

_CONTROL_S = 5.0
_PID = re.compile(r"pid=(\d+)")


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
        """Cheap liveness: our child has not exited and its socket accepts connections."""
        if self.proc is not None and self.proc.returncode is not None:
            return False
        return self.socket_accepts()

    def socket_accepts(self) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(0.5)
            sock.connect(str(self.control_path))
        except OSError:
            return False
        finally:
            sock.close()
        return True

    async def check(self) -> bool:
        """``ssh -O check`` (a full round trip through the master's mux protocol)."""
        with anyio.move_on_after(_CONTROL_S):
            outcome = await run_process(
                self._args.control(self.target, self.control_path, "check"),
                stdin=None,
                stdout=HeadTail(4096, 0),
                stderr=HeadTail(4096, 0),
            )
            self.last_checked = time.monotonic()
            if outcome.returncode == 0:
                match = _PID.search(outcome.stderr.head.decode(errors="replace"))
                if match and self.pid is None:
                    self.pid = int(match.group(1))
                return True
        return False

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start the master; return once its control socket listens. Raises from the exception tree."""
        token = f"rog-ready-{new_nonce()}"
        argv = self._args.master(self.target, self.control_path, token)
        proc = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.proc, self.pid = proc, proc.pid
        ready = False
        try:
            with anyio.move_on_after(self._settings.connect_timeout_s + 5):
                ready = await self._read_token(proc, token)
        except BaseException:
            await reap(proc)
            raise
        if not ready:
            with anyio.move_on_after(2):
                await self._drain(proc.stderr)
            await reap(proc)
            raise self._startup_error(proc.returncode)
        task_group.start_soon(self._supervise, proc)
        self.last_used = self.last_checked = time.monotonic()

    def _startup_error(self, returncode: int | None) -> TransportError:
        stderr = self.stderr.tail.decode(errors="replace")
        error = classify_ssh_failure(stderr, target=self.target.name, stage="master", command_started=False)
        if isinstance(error, HostKeyError | AuthError | ConnectError):
            return error
        detail = stderr.strip()[-600:] or f"ssh master exited with {returncode}"
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
        """Drain the master's output for its whole life and reap it when it exits."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._drain, proc.stderr)
                tg.start_soon(self._drain, proc.stdout)
                await proc.wait()
                tg.cancel_scope.cancel()
        finally:
            await reap(proc)
            self._exited.set()

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
                await reap(self.proc)
            if not self.socket_accepts():
                with contextlib.suppress(FileNotFoundError):
                    self.control_path.unlink()
