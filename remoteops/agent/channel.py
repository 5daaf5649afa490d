"""One live agent session on one target: boot it, multiplex requests over it, notice when it dies.

The session is an OpenSSH client (a mux client of the target's master, or a one-shot connection when the
pool has none) running a fresh :class:`~remoteops.agent.boot.AgentBoot`'s command; it holds one channel slot
of the pool for its whole life. :meth:`AgentChannel.run` is its life as a task (``task_group.start``): it
returns control once the agent answered HELLO (stdout before the loader's start marker is dropped: login
banners), then serves until it is closed, goes idle for ``agent_idle_s``, dies, or is found stuck by its
liveness probe (``liveness``: then ``lost`` is set and the session ends at once). Everything it started is
reaped through ``supervised_child``.

Ambiguity is never resolved by re-sending: a request whose first byte was handed to the session and whose
answer never came is ``TransportLost`` (``command_started`` True once the agent said STARTED); a request
that provably never left (:class:`ChannelGone`) may go to a fresh channel.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from remoteops._capture import HeadTail
from remoteops._errors import TransportError, TransportLost
from remoteops._exec import ExecRequest, RawExec
from remoteops._models import TargetIdentity
from remoteops._process import supervised_child
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.agent import program as proto
from remoteops.agent.boot import AgentUnavailable, MasterGone, StartScanner, boot_failure, new_boot
from remoteops.agent.exec import KillReport, exec_meta, raw_result
from remoteops.agent.liveness import Liveness
from remoteops.agent.root import RootStart
from remoteops.privilege.wire import Escalation, OneTimeSecret
from remoteops.ssh.args import SshArgs
from remoteops.ssh.master import Master
from remoteops.ssh.pool import MasterPool

__all__ = ["AgentChannel", "AgentRefused", "ChannelGone"]

_READ_CHUNK = 256 * 1024
_STDIN_CHUNK = 256 * 1024
_WRITE_CHUNK = 256 * 1024  # a big batch is written in parts: each part taken is a sign of the agent's life
_CANCEL_GRACE_S = 1.0
_CANCEL_WAIT_S = _CANCEL_GRACE_S + 4.0
_CLOSE_WAIT_S = 3.0
_BOOT_EXTRA_S = 10.0
_HIGH_WATER = 1024 * 1024  # queued bytes beyond which senders wait for the writer
PING: int = proto.PING  # answered RESULT {} by the agent's loop (listed in HELLO kinds)


class ChannelGone(Exception):
    """The channel died before any byte of the request was written: nothing ran, a fresh one may be used."""


class AgentRefused(Exception):
    """The agent answered a request with ERROR; ``meta`` is that answer ({code, message, ...})."""

    def __init__(self, meta: dict[str, Any]) -> None:
        super().__init__(f"{meta.get('code')}: {meta.get('message')}")
        self.meta = meta


@dataclass
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    written: bool = False
    queued: bool = False  # its EXEC frame is queued for the writer
    abandoned: bool = False  # cancelled before the writer sent it: its frames are dropped, never sent
    started: bool = False
    lost: bool = False
    result: tuple[dict[str, Any], bytes] | None = None
    error: dict[str, Any] | None = None


def _exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, reaped or not (``waitid`` with WNOWAIT: a peek, one syscall)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


class AgentChannel:
    def __init__(
        self,
        target: TargetSpec,
        key: str,
        settings: TransportSettings,
        pool: MasterPool,
        escalation: Escalation | None = None,
        secret: OneTimeSecret | None = None,
    ) -> None:
        self.target = target
        self.key = key
        self.boot = new_boot()
        # a root agent (``_agent_root``): started through this provider, proved uid 0 in its HELLO
        self.root = None if escalation is None else RootStart(escalation, secret, self.boot)
        self.provider = None if self.root is None else self.root.provider
        self._settings = settings
        self._pool = pool
        self._args = SshArgs(settings)
        self._proc: anyio.abc.Process | None = None
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        # frames waiting for the writer, each with the request it belongs to (one write for all queued)
        self._outq: list[tuple[_Pending, bytes]] = []
        self._queued = 0
        self._wake_writer = anyio.Event()
        self._taken = anyio.Event()
        self._changed = anyio.Event()
        self._dead = False
        self._closing = False
        self._stopped = anyio.Event()
        self._stderr_done = anyio.Event()
        self.inflight = 0
        self.last_used = time.monotonic()
        self.multiplexed = False
        self.master: Master | None = None
        self.info: dict[str, Any] = {}
        self.liveness: Liveness | None = None  # None: the agent has no PING; never probed
        self.lost = False  # found stuck by the liveness probe
        self.stderr = HeadTail(0, 4096)
        if self.root is not None:  # a password provider's prompt is watched for on stderr
            self.stderr = self.root.stderr(self.stderr)

    # -- state ------------------------------------------------------------------------------------------
    @property
    def usable(self) -> bool:
        if self._dead or self._closing or self._proc is None or _exited(self._proc.pid):
            return False
        master = self.master  # a master that exited takes the session with it, reaped yet or not
        return master is None or master.proc is None or not _exited(master.proc.pid)

    async def healthy(self) -> bool:
        """Usable, and after ``master_check_idle_s`` of idleness its master passes the mux alive check
        (in-process, no ssh process), and an agent not heard from for ``agent_probe_s`` answers a probe:
        a request is only written to a session that can still carry it."""
        if not self.usable:
            return False
        idle = self.inflight == 0 and time.monotonic() - self.last_used >= self._settings.master_check_idle_s
        if self.master is not None and idle and not await self.master.check():
            self._die()
            return False
        if self.liveness is not None and not await self.liveness.check():
            return False
        return self.usable

    @property
    def build(self) -> str:
        """The running agent's build id: its HELLO's ``build``, else the hash of the bytes sent."""
        build = self.info.get("build")
        return build if isinstance(build, str) and build else self.boot.build

    @property
    def uid(self) -> int | None:
        """The agent's effective uid on the target, as its HELLO reported it."""
        uid = self.info.get("uid")
        return uid if isinstance(uid, int) and not isinstance(uid, bool) else None

    @property
    def pid(self) -> int | None:
        """The agent's pid on the target."""
        pid = self.info.get("pid")
        return int(pid) if isinstance(pid, int) else None

    def _poke(self) -> None:
        self._changed.set()

    # -- life -------------------------------------------------------------------------------------------
    async def run(
        self, identity: TargetIdentity, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The channel's whole life. Raises (before ``started``) from the exception tree, or
        AgentUnavailable / MasterGone; afterwards it only ends."""
        try:
            async with self._pool.channel(self.target, identity) as master:
                await self._session(master, task_status)
        finally:
            self._die()
            self._stopped.set()

    async def _session(self, master: Master | None, task_status: anyio.abc.TaskStatus[None]) -> None:
        remote = self.boot.command() if self.root is None else self.root.boot.command
        if master is None:
            argv = self._args.oneshot(self.target, remote)
        else:
            argv = self._args.mux_client(self.target, master.control_path, remote)
        self.multiplexed = master is not None
        self.master = master
        failure: BaseException | None = None
        # nothing is raised inside the task group, so no exception groups leave this method
        async with supervised_child(argv, stdin=subprocess.PIPE) as proc, anyio.create_task_group() as tg:
            tg.start_soon(self._drain_stderr, proc)
            reader = proto.FrameReader()
            try:
                hello = await self._boot(proc, reader)
            except AgentUnavailable as exc:
                hello, failure = None, exc
            refused = None
            if hello is not None and self.root is not None:
                refused = self.root.refused(hello, target=self.target.name)
            if hello is None:
                if failure is None:
                    failure = await self._boot_failure(proc, master)
                tg.cancel_scope.cancel()
            elif refused is not None:  # not uid 0: never used, ended at once
                failure = refused
                await self._goodbye(proc)
                tg.cancel_scope.cancel()
            else:
                self.info = hello
                self._proc = proc
                self.last_used = time.monotonic()  # idleness counts from the moment it can serve
                kinds = hello.get("kinds")
                if isinstance(kinds, list) and PING in kinds:
                    self.liveness = Liveness(self._settings, self._ping, self._lose)
                    tg.start_soon(self.liveness.run)
                task_status.started()
                tg.start_soon(self._read, proc, reader)
                tg.start_soon(self._write, proc)
                await self._serve()
                if not self.lost:  # a stuck agent reads nothing: its session is ended at once
                    await self._goodbye(proc)
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _boot(self, proc: anyio.abc.Process, reader: proto.FrameReader) -> dict[str, Any] | None:
        """Send the agent and HELLO; return the agent's HELLO answer, or None when the session ended."""
        if proc.stdin is None or proc.stdout is None:
            return None
        hello = proto.encode(0, proto.HELLO, {"min": proto.PROTOCOL_MIN, "max": proto.PROTOCOL_MAX})
        start = StartScanner(self.boot.marker)  # login-shell output before the agent's start is dropped
        wait_s = 0.0 if self.root is None else self.root.wait_s(self._settings.connect_timeout_s)
        ceiling = self._settings.connect_timeout_s + _BOOT_EXTRA_S + 2 * wait_s
        with anyio.move_on_after(ceiling):
            try:
                # a password provider: the password only after its prompt, the agent only after the start
                if self.root is not None and not await self.root.enter(proc.stdin, wait_s):
                    return None
                await proc.stdin.send(self.boot.source + hello)
                while True:
                    for _rid, kind, _flags, meta, _data in reader.feed(
                        start.feed(await proc.stdout.receive(_READ_CHUNK))
                    ):
                        if kind == proto.HELLO:
                            return meta or {}
                        if kind == proto.ERROR:
                            message = str((meta or {}).get("message", "the agent refused HELLO"))
                            raise AgentUnavailable(message, capability="agent protocol")
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ValueError):
                return None
        raise AgentUnavailable(f"the agent did not answer within {ceiling:.0f}s")

    async def _boot_failure(self, proc: anyio.abc.Process, master: Master | None) -> BaseException:
        if proc.stdin is not None:  # nothing more will come (sudo must not wait for another password)
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await proc.stdin.aclose()
        with anyio.move_on_after(_CLOSE_WAIT_S):
            await proc.wait()
            await self._stderr_done.wait()
        via_master = master is not None
        if self.root is not None:
            failure = self.root.failure(
                proc.returncode, self.stderr.tail, target=self.target.name, via_master=via_master
            )
        else:
            stderr = self.stderr.tail.decode(errors="replace").strip()
            failure = boot_failure(proc.returncode, stderr, target=self.target.name, via_master=via_master)
        if isinstance(failure, MasterGone) and master is not None:
            await self._pool.invalidate(master)
        return failure

    async def _drain_stderr(self, proc: anyio.abc.Process) -> None:
        try:
            if proc.stderr is None:
                return
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                while True:
                    self.stderr.feed(await proc.stderr.receive(4096))
        finally:
            self._stderr_done.set()

    async def _read(self, proc: anyio.abc.Process, reader: proto.FrameReader) -> None:
        try:
            if proc.stdout is None:
                return
            while True:
                chunk = await proc.stdout.receive(_READ_CHUNK)
                if self.liveness is not None:
                    self.liveness.heard()
                for rid, kind, _flags, meta, data in reader.feed(chunk):
                    self._deliver(rid, kind, meta or {}, data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ValueError):
            pass
        finally:
            self._die()

    def _deliver(self, rid: int, kind: int, meta: dict[str, Any], data: bytes) -> None:
        pending = self._pending.get(rid)
        if pending is None:
            return
        if kind == proto.STARTED:
            pending.started = True
        elif kind == proto.RESULT:
            pending.result = (meta, data)
            pending.done.set()
        elif kind == proto.ERROR:
            pending.error = meta
            pending.done.set()

    def _lose(self) -> None:
        """The liveness probe went unanswered: the agent is stuck. Its requests in flight end now."""
        self.lost = True
        self._die()

    def _die(self) -> None:
        if self._dead:
            return
        self._dead = True
        if self.liveness is not None:
            self.liveness.stop()
        for pending in self._pending.values():
            pending.lost = True
            pending.done.set()
        self._wake_writer.set()
        self._taken.set()
        self._poke()

    async def _serve(self) -> None:
        """Until the channel dies, is closed, or has been idle for ``agent_idle_s``."""
        idle_s = self._settings.agent_idle_s
        while not self._dead and not self._closing:
            wait = math.inf
            if self.inflight == 0:
                wait = idle_s - (time.monotonic() - self.last_used)
                if wait <= 0:
                    self._closing = True
                    return
            self._changed = anyio.Event()
            with anyio.move_on_after(wait):
                await self._changed.wait()

    async def _goodbye(self, proc: anyio.abc.Process) -> None:
        """Close the agent's stdin (it kills what it started and exits); wait for it, bounded."""
        self._closing = True
        with anyio.CancelScope(shield=True):
            if proc.stdin is not None:
                with anyio.move_on_after(1):
                    await proc.stdin.aclose()
            with anyio.move_on_after(_CLOSE_WAIT_S):
                await proc.wait()

    async def close(self) -> None:
        """Ask the channel to end and wait until it did (bounded; the supervised child reaps the rest)."""
        self._closing = True
        self._poke()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_WAIT_S + 8):
            await self._stopped.wait()

    # -- requests ---------------------------------------------------------------------------------------
    async def _send(self, pending: _Pending, *frames: bytes, first: bool = False) -> None:
        """Queue frames of ``pending``'s request for the writer, whole and in order. ChannelGone when the
        channel is already dead (nothing of them was written). ``first``: the request's EXEC frame — the
        writer sets ``pending.written`` when it hands that to the session, and drops the frames of a
        request abandoned before that."""
        if self._dead or self._proc is None:
            raise ChannelGone
        data = b"".join(frames)
        self._outq.append((pending, data))
        self._queued += len(data)
        if first:
            pending.queued = True
        self._wake_writer.set()
        while self._queued > _HIGH_WATER and not self._dead:  # back-pressure for big stdin payloads
            await self._taken.wait()  # shared by every waiting sender: the writer wakes them all

    async def _write(self, proc: anyio.abc.Process) -> None:
        """The one writer: everything queued since its last write goes out in one write, in 256 KiB parts
        when big (bursts of requests cost one syscall, one ssh channel packet and one read by the agent,
        not one each)."""
        try:
            if proc.stdin is None:
                return
            while not self._dead:
                if not self._outq:
                    self._wake_writer = anyio.Event()
                    await self._wake_writer.wait()
                    await anyio.lowlevel.checkpoint()  # let the other tasks woken with us queue theirs
                    continue
                batch, self._outq, self._queued = self._outq, [], 0
                parts = []
                for pending, data in batch:
                    if pending.abandoned and not pending.written:
                        continue
                    if pending.queued:
                        pending.written = True  # from here on the request may reach the agent
                    parts.append(data)
                taken, self._taken = self._taken, anyio.Event()
                taken.set()
                data = b"".join(parts)
                for offset in range(0, len(data), _WRITE_CHUNK):
                    await proc.stdin.send(data[offset : offset + _WRITE_CHUNK])
                    if self.liveness is not None:  # the agent takes what it is sent: its loop runs
                        self.liveness.heard()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            self._die()

    def _new_id(self) -> int:
        self._next_id = self._next_id % 0xFFFFFFFF + 1
        return self._next_id

    async def _ping(self) -> bool:
        """One PING (not a request of anyone's: neither in flight nor use): True once answered, False when
        the channel died first. Cancelled (its bound passed), it is abandoned."""
        rid = self._new_id()
        pending = _Pending()
        self._pending[rid] = pending
        try:
            await self._send(pending, proto.encode(rid, PING, None), first=True)
            await pending.done.wait()
        except ChannelGone:
            return False
        finally:
            pending.abandoned = True
            self._pending.pop(rid, None)
        return not pending.lost

    async def execute(self, request: ExecRequest, kill: KillReport) -> RawExec:
        """Run one command on the agent. Cancellation kills it on the target (reported in ``kill``)."""
        if not self.usable:
            raise ChannelGone
        rid = self._new_id()
        pending = _Pending()
        self._pending[rid] = pending
        self.inflight += 1
        self.last_used = time.monotonic()
        meta = exec_meta(request, self._settings.kill_after_s)
        started = time.monotonic()
        try:
            try:
                await self._send(pending, proto.encode(rid, proto.EXEC, meta), first=True)
                if request.stdin is not None:
                    await self._send_stdin(rid, pending, request.stdin)
                await pending.done.wait()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await self._cancel(rid, pending, kill)
                raise
        finally:
            self._pending.pop(rid, None)
            self.inflight -= 1
            self.last_used = time.monotonic()
            if self.inflight == 0:
                self._poke()
        return self._outcome(request, pending, time.monotonic() - started)

    async def _send_stdin(self, rid: int, pending: _Pending, data: bytes) -> None:
        view = memoryview(data)
        offsets = range(0, max(len(view), 1), _STDIN_CHUNK)
        for offset in offsets:
            last = offset + _STDIN_CHUNK >= len(view)
            chunk = bytes(view[offset : offset + _STDIN_CHUNK])
            try:
                await self._send(
                    pending, proto.encode(rid, proto.DATA, None, chunk, proto.F_END if last else 0)
                )
            except ChannelGone:
                return  # the EXEC frame went out: the request's outcome is decided by the channel's end

    async def _cancel(self, rid: int, pending: _Pending, kill: KillReport) -> None:
        if not pending.written:
            pending.abandoned = True  # still queued: the writer drops it, nothing reaches the agent
            kill.answered = kill.confirmed = True
            return
        if pending.done.is_set():
            return
        with contextlib.suppress(ChannelGone):
            await self._send(pending, proto.encode(rid, proto.CANCEL, {"grace_s": _CANCEL_GRACE_S}))
        with anyio.move_on_after(_CANCEL_WAIT_S):
            await pending.done.wait()
        if pending.result is not None:
            kill.record(pending.result[0])

    def _lost_detail(self) -> str:
        if self.lost:
            return (
                f"the agent (pid {self.pid}) stopped answering: no answer to a liveness probe within "
                f"{self._settings.agent_lost_after_s:g}s; it is killed and replaced, the request may have run"
            )
        return self.stderr.tail.decode(errors="replace").strip()[-600:]

    def _outcome(self, request: ExecRequest, pending: _Pending, elapsed_s: float) -> RawExec:
        name = self.target.name
        if pending.result is not None:
            meta, data = pending.result
            return raw_result(meta, data, target=name, multiplexed=self.multiplexed, elapsed_s=elapsed_s)
        if pending.error is not None:
            raise TransportError(
                f"the agent refused the request: {pending.error.get('code')}: {pending.error.get('message')}",
                target=name,
                stage="agent",
            )
        if not pending.written:
            raise ChannelGone
        raise TransportLost(
            self._lost_detail() or "the agent channel was lost while the command may have been running",
            target=name,
            stage="agent",
            command_started=True if pending.started else None,
        )

    async def request(
        self, kind: int, meta: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One request answered by one final frame (the file primitives): its RESULT as (meta, data).
        AgentRefused for an ERROR answer; ChannelGone when nothing was written; TransportLost
        (``command_started`` None) when the channel died after the request was handed to the session.
        Cancelled, the request is abandoned: its answer, should it come, is dropped."""
        if not self.usable:
            raise ChannelGone
        rid = self._new_id()
        pending = _Pending()
        self._pending[rid] = pending
        self.inflight += 1
        self.last_used = time.monotonic()
        try:
            try:
                await self._send(pending, proto.encode(rid, kind, meta, data), first=True)
                await pending.done.wait()
            except anyio.get_cancelled_exc_class():
                pending.abandoned = True
                raise
        finally:
            self._pending.pop(rid, None)
            self.inflight -= 1
            self.last_used = time.monotonic()
            if self.inflight == 0:
                self._poke()
        if pending.result is not None:
            return pending.result
        if pending.error is not None:
            raise AgentRefused(pending.error)
        if not pending.written:
            raise ChannelGone
        raise TransportLost(
            self._lost_detail()
            or "the agent channel was lost after the request was sent; it may have been carried out",
            target=self.target.name,
            stage="agent",
            command_started=None,
        )
