"""The agent carrier: per target one long-lived agent channel carrying every command; ssh where it cannot.

Choice per target (``TargetSpec.carrier``, else ``TransportSettings.carrier``):

* ``ssh`` — always one OpenSSH process per call (:class:`SshProcessCarrier`);
* ``agent`` — always the agent; a target that cannot run it is ``MissingCapability``;
* ``auto`` — the agent; a target without a usable ``python3`` (absent, older than 3.8, refused) or with an
  agent that speaks another protocol falls back to ssh, recorded with the reason (``state``) until
  ``forget`` (``capabilities(refresh=True)``) lets the next call try again. The call that finds no agent
  does not wait for one: it starts the boot in the background and goes over ssh, so a cold target's first
  call costs what it costs on the ssh carrier. Calls arriving while that boot runs wait for it (at most
  ``connect_timeout_s``, then ssh) instead of each taking a session of their own: a cold burst must not
  take the sessions the boot needs (against sshd ``MaxSessions`` below ``max_channels_per_target`` it
  would be refused), and a boot the master refused anyway is retried with a short backoff.

Channels start lazily and single-flight (concurrent first callers wait for one start, and share its
failure), are replaced when they die, when the target's ``ssh -G`` identity changes or when the agent's
build differs from the one this gateway sends (``boot.current_build``), close themselves after
``agent_idle_s`` without requests, and are all closed by :meth:`AgentCarrier.aclose`. An agent found stuck
by its channel's liveness probe (``liveness``) is killed on the target (``kill -KILL`` of its pid, one short
command over the master, bounded) and replaced at once; its calls in flight ended as ``TransportLost``.
Host-key, auth and connect failures come from the same pool and classification as the ssh carrier.

Per target one :class:`~remoteops.agent.slots.TargetAgents` holds everything: its user agent's ``Slot``,
its root agent's, and the background boot of the user agent.

Privileged requests (``request.escalation``) go over ssh behind their provider, unless the operator enabled
the root agent (``PrivilegeSettings.agent``): then a separate per-target root agent channel, started through
that provider (a password provider's password entered once, at its boot) and proved uid 0
(``_agent_root``), carries them, with the same lazy start, single flight, idle close, replacement and
``aclose`` as the user channels.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.abc

from remoteops._errors import CommandTimeout, ConnectError, MissingCapability, RemoteOpsError
from remoteops._exec import CarrierName, ExecRequest, RawExec
from remoteops._models import CarrierState, TargetIdentity
from remoteops._settings import CarrierMode, TargetSpec, TransportSettings
from remoteops.agent.boot import AgentUnavailable, MasterGone, current_build
from remoteops.agent.channel import AgentChannel, AgentRefused, ChannelGone
from remoteops.agent.exec import KillReport
from remoteops.agent.slots import KILL_LIMIT_S, Slot, TargetAgents, carrier_state, stuck_kill
from remoteops.privilege.errors import PrivilegeError
from remoteops.privilege.wire import Escalation, OneTimeSecret
from remoteops.ssh.carrier import SshProcessCarrier
from remoteops.ssh.pool import MasterPool

__all__ = ["AgentCarrier"]

_T = TypeVar("_T")
_LOCAL_GRACE_S = 5.0
_FRESH_CHANNEL_TRIES = 3
_ROOT_MIN_SLOTS = 3  # a root agent leaves a slot for ssh calls beside the user agent
_BOOT_TRIES = 4  # starts of one channel the master may refuse (a burst holding its sessions) before giving up
_BOOT_BACKOFF_S = 0.1  # doubled after each refusal


class _UseSsh(Exception):
    """No agent for this call (booting in the background, or unavailable in auto mode): ssh carries it."""


class AgentCarrier:
    def __init__(
        self,
        settings: TransportSettings,
        pool: MasterPool,
        task_group: anyio.abc.TaskGroup,
        ssh: SshProcessCarrier,
    ) -> None:
        self._settings = settings
        self._pool = pool
        self._tg = task_group
        self._ssh = ssh
        self._targets: dict[str, TargetAgents] = {}
        self._closing = False
        pool.reclaim = self._reclaim_idle

    def _of(self, name: str) -> TargetAgents:
        target = self._targets.get(name)
        if target is None:
            target = self._targets[name] = TargetAgents()
        return target

    def _channels(self) -> Iterator[tuple[Slot, AgentChannel]]:
        """Every channel with its slot: the user agents' first, then the root agents'."""
        slots = [t.user for t in self._targets.values()] + [t.root for t in self._targets.values()]
        for slot in slots:
            if slot.channel is not None:
                yield slot, slot.channel

    # -- choice and state ---------------------------------------------------------------------------
    def mode(self, target: TargetSpec) -> CarrierMode:
        return target.carrier or self._settings.carrier

    def current(self, target: TargetSpec) -> CarrierName | None:
        """The carrier the target's next command takes (None: not decided yet)."""
        user = self._targets.get(target.name, TargetAgents()).user
        if self.mode(target) == "ssh" or user.fallback is not None:
            return "ssh"
        if user.live() is not None:
            return "agent"
        return user.used

    def state(self, target: TargetSpec) -> CarrierState:
        return carrier_state(
            self.mode(target), self.current(target), self._targets.get(target.name, TargetAgents())
        )

    def forget(self, name: str) -> None:
        """Let the next command try the agent again (after a fallback to ssh)."""
        t = self._targets.get(name)
        if t is not None:
            t.user.fallback = t.user.failure = t.root.fallback = t.root.failure = None

    # -- exec ---------------------------------------------------------------------------------------
    async def execute(self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest) -> RawExec:
        mode = self.mode(target)
        user = self._of(target.name).user
        if request.escalation is not None:  # privileged: behind its provider, on the root agent if enabled
            if self._root_agent_for(target, request.escalation):
                return await self._as_root(target, identity, request, request.escalation)
            self._of(target.name).root.used = "ssh"
            return await self._ssh.execute(target, identity, request)
        if mode == "ssh" or (mode == "auto" and user.fallback is not None):
            return await self._via_ssh(target, identity, request)
        # A call can go over ssh while the agent boots only if the agent leaves it a channel slot.
        background = mode == "auto" and self._settings.max_channels_per_target > 1

        async def open_() -> AgentChannel:
            if background:
                ready = await self._ready_channel(target, identity)
                if ready is None:  # the agent boots in the background (or could not boot in time)
                    raise _UseSsh
                return ready
            try:
                return await self._channel(target, identity)
            except AgentUnavailable as exc:
                if mode == "auto":
                    user.fallback = exc.reason
                    raise _UseSsh from None
                raise MissingCapability(
                    f"the agent cannot run on this target: {exc.reason}",
                    target=target.name,
                    capability=exc.capability,
                ) from None

        async def use(channel: AgentChannel) -> RawExec:
            user.used = "agent"
            self._pool.counters["runs"] += 1
            return await self._on(channel, target, request)

        try:
            return await self._fresh(target, open_, use, what="agent channel", outcome="nothing ran")
        except _UseSsh:
            return await self._via_ssh(target, identity, request)

    async def _fresh(
        self,
        target: TargetSpec,
        open_: Callable[[], Awaitable[AgentChannel]],
        use: Callable[[AgentChannel], Awaitable[_T]],
        *,
        what: str,
        outcome: str,
    ) -> _T:
        """``use`` on the channel ``open_`` gives; one that died before any byte of the request was written
        (``ChannelGone``: nothing ran) is replaced by a fresh one, a bounded number of times. (A channel
        that passed its health check can still end a moment later: its agent was killed and the EOF had
        not arrived yet.)"""
        for _attempt in range(_FRESH_CHANNEL_TRIES):
            channel = await open_()
            try:
                return await use(channel)
            except ChannelGone:
                continue
        raise ConnectError(
            f"the {what} closed before the request could be sent; {outcome}",
            target=target.name,
            stage="agent",
            reason="closed",
        )

    def _root_agent_for(self, target: TargetSpec, escalation: Escalation) -> bool:
        t = self._of(target.name)
        return (
            escalation.agent
            and self.mode(target) != "ssh"
            and t.user.fallback is None
            and t.root.fallback is None
            and self._settings.max_channels_per_target >= _ROOT_MIN_SLOTS
        )

    async def _as_root(
        self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest, escalation: Escalation
    ) -> RawExec:
        """One privileged command on the target's root agent (started through ``escalation``'s provider;
        a provider that refuses is the same ``PrivilegeError`` as on ssh, so the escalator goes on)."""
        name = target.name
        root = self._of(name).root

        async def open_() -> AgentChannel:
            channel = await self._channel(target, identity, escalation, request.secret)
            if channel.uid != 0 or channel.provider != escalation.provider:  # proved at boot; never else
                raise PrivilegeError(
                    f"the root agent on {name} is not uid 0 through {escalation.provider}; nothing ran",
                    target=name,
                    reason="not_root",
                    provider=escalation.provider,
                )
            return channel

        async def use(channel: AgentChannel) -> RawExec:
            root.used = "agent"
            self._pool.counters["runs"] += 1
            return await self._on(channel, target, request)

        try:
            return await self._fresh(target, open_, use, what="root agent channel", outcome="nothing ran")
        except AgentUnavailable as exc:  # python cannot run as root there: this target's root uses ssh
            if self.mode(target) == "agent":
                raise MissingCapability(
                    f"the root agent cannot run on this target: {exc.reason}",
                    target=name,
                    capability=exc.capability,
                ) from None
            root.fallback = exc.reason
            root.used = "ssh"
            return await self._ssh.execute(target, identity, request)

    async def request(
        self, target: TargetSpec, identity: TargetIdentity, kind: int, meta: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One agent request (the file primitives) on the target's channel, waiting for the agent to boot.
        A target whose carrier is ssh, or that cannot run the agent, is ``MissingCapability``; an ERROR
        answer is ``AgentRefused``."""
        mode = self.mode(target)
        if mode == "ssh":
            raise MissingCapability(
                "this operation needs the agent, and the target's carrier is ssh",
                target=target.name,
                capability="agent (carrier = ssh)",
            )
        user = self._of(target.name).user
        if user.fallback is not None:
            raise MissingCapability(
                f"this operation needs the agent, which cannot run on this target: {user.fallback}",
                target=target.name,
                capability="python3 (>= 3.8) for the agent",
            )

        async def open_() -> AgentChannel:
            try:
                return await self._channel(target, identity)
            except AgentUnavailable as exc:
                if mode == "auto":
                    user.fallback = exc.reason
                raise MissingCapability(
                    f"this operation needs the agent, which cannot run on this target: {exc.reason}",
                    target=target.name,
                    capability=exc.capability,
                ) from None

        async def use(channel: AgentChannel) -> tuple[dict[str, Any], bytes]:
            user.used = "agent"
            try:
                return await channel.request(kind, meta, data)
            except AgentRefused as exc:
                if exc.meta.get("code") == "unsupported":
                    raise MissingCapability(
                        "the agent on this target does not support this request",
                        target=target.name,
                        capability=f"agent request kind 0x{kind:02x}",
                    ) from None
                raise

        return await self._fresh(target, open_, use, what="agent channel", outcome="nothing was done")

    async def _via_ssh(self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest) -> RawExec:
        self._of(target.name).user.used = "ssh"
        return await self._ssh.execute(target, identity, request)

    def _fits(self, channel: AgentChannel, key: str, provider: str | None) -> bool:
        """Whether ``channel`` may carry the target's requests: same identity (and root provider), and the
        agent this gateway sends now (an agent of another build is replaced)."""
        return channel.key == key and channel.provider == provider and channel.build == current_build()

    async def _ready_channel(self, target: TargetSpec, identity: TargetIdentity) -> AgentChannel | None:
        """auto mode: the live channel, or None after making sure one boots in the background. A boot
        already under way is waited for (bounded): its session comes before this call's."""
        t = self._of(target.name)
        key = self._pool.key_for(target, identity)
        channel = t.user.channel
        if channel is not None and self._fits(channel, key, None) and await channel.healthy():
            return channel
        booting = t.booting
        if booting is not None:
            with anyio.move_on_after(self._settings.connect_timeout_s):
                await booting.wait()
            channel = t.user.live()
            return channel if channel is not None and self._fits(channel, key, None) else None
        failed = t.boot_failed
        if failed is None or time.monotonic() - failed >= self._settings.master_retry_after_s:
            self._start_boot(target, identity)
        return None

    def _start_boot(self, target: TargetSpec, identity: TargetIdentity) -> None:
        t = self._of(target.name)
        if t.booting is None and not self._closing:
            t.booting = anyio.Event()
            self._tg.start_soon(self._boot, target, identity)

    async def _boot(self, target: TargetSpec, identity: TargetIdentity) -> None:
        t = self._of(target.name)
        try:
            await self._channel(target, identity)
            t.boot_failed = t.boot_error = None
        except AgentUnavailable as exc:
            if self.mode(target) == "auto":
                t.user.fallback = exc.reason
            else:
                t.boot_error = exc.reason
        except Exception as exc:  # a background task must not end RemoteOps
            # the ssh path meets (and reports) transport failures itself; retried after a pause
            t.boot_failed = time.monotonic()
            t.boot_error = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            booting, t.booting = t.booting, None
            if booting is not None:
                booting.set()

    async def settle(self, target: TargetSpec, identity: TargetIdentity) -> CarrierState:
        """Make the target's carrier ready (start or wait for its agent per mode) and return its state."""
        mode = self.mode(target)
        if mode == "agent":

            async def open_() -> AgentChannel:
                return await self._channel(target, identity)

            async def use(channel: AgentChannel) -> None:
                if not channel.usable:
                    raise ChannelGone

            with contextlib.suppress(AgentUnavailable, RemoteOpsError):  # the state says why
                await self._fresh(target, open_, use, what="agent channel", outcome="nothing ran")
        elif mode == "auto" and self._of(target.name).user.fallback is None:
            await self._ready_channel(target, identity)
            booting = self._of(target.name).booting
            if booting is not None:
                await booting.wait()
        return self.state(target)

    async def _on(self, channel: AgentChannel, target: TargetSpec, request: ExecRequest) -> RawExec:
        ceiling = request.time_limit_s + self._settings.kill_after_s + _LOCAL_GRACE_S
        kill = KillReport()
        with anyio.move_on_after(ceiling):
            return await channel.execute(request, kill)
        raise CommandTimeout(
            f"no clean end within {ceiling:.1f}s",
            target=target.name,
            time_limit_s=request.time_limit_s,
            remote_killed=kill.confirmed,
        )

    def live_root(self, name: str) -> str | None:
        """The provider of the target's live root agent (it serves root commands without a new password)."""
        t = self._targets.get(name)
        channel = None if t is None else t.root.live()
        return channel.provider if channel is not None else None

    # -- channels -----------------------------------------------------------------------------------
    async def _channel(
        self,
        target: TargetSpec,
        identity: TargetIdentity,
        escalation: Escalation | None = None,
        secret: OneTimeSecret | None = None,
    ) -> AgentChannel:
        """The target's live user channel (or, with ``escalation``, its root channel through that
        provider), started when there is none."""
        key = self._pool.key_for(target, identity)
        name = target.name
        provider = None if escalation is None else escalation.provider
        t = self._of(name)
        slot = t.user if escalation is None else t.root
        channel = slot.channel
        if channel is not None and self._fits(channel, key, provider) and await channel.healthy():
            return channel
        asked = time.monotonic()
        async with slot.lock:  # single flight: one start per target (and kind) at a time, its failure shared
            channel = slot.channel
            if channel is not None and channel.usable and self._fits(channel, key, provider):
                return channel
            if channel is not None:
                slot.channel = None
                await channel.close()  # dead, or the identity, the root provider or the build changed
            if slot.failure is not None and slot.failure[0] >= asked:
                raise slot.failure[1]
            if escalation is not None and escalation.needs_password and (secret is None or secret.used):
                raise PrivilegeError(  # the live root agent it was meant for ended just now
                    f"the root agent through {escalation.provider} on {name} ended before this command was "
                    "sent; nothing ran, and the next call asks for the password again",
                    target=name,
                    reason="refused",
                    provider=escalation.provider,
                )
            await self._make_room(key)
            return await self._start(target, identity, key, slot, escalation, secret)

    async def _start(
        self,
        target: TargetSpec,
        identity: TargetIdentity,
        key: str,
        slot: Slot,
        escalation: Escalation | None,
        secret: OneTimeSecret | None,
    ) -> AgentChannel:
        """Start one channel into ``slot`` (its lock held). A session the master refused (it died under
        us, or every session it may open is taken) is tried again after a short backoff, bounded."""
        for attempt in range(_BOOT_TRIES):
            if attempt:
                await anyio.sleep(_BOOT_BACKOFF_S * 2 ** (attempt - 1))
            channel = AgentChannel(target, key, self._settings, self._pool, escalation, secret)
            try:
                await self._tg.start(self._life, target, identity, slot, channel)
            except MasterGone:
                continue  # nothing of the agent ran; the pool makes a fresh master if that one died
            except (RemoteOpsError, AgentUnavailable) as exc:
                slot.failure = (time.monotonic(), exc)
                raise
            slot.failure = None
            slot.channel = channel
            slot.started += 1
            t = self._of(target.name)
            if slot is t.user:  # whoever started it, the target's agent is up: no boot failure to report
                t.boot_failed = t.boot_error = None
            return channel
        raise ConnectError(
            f"the master refused the agent session {_BOOT_TRIES} times",
            target=target.name,
            stage="agent",
            reason="multiplex",
        )

    async def _life(
        self,
        target: TargetSpec,
        identity: TargetIdentity,
        slot: Slot,
        channel: AgentChannel,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """One channel's life (raises only before ``started``); after a stuck agent, its burial and, for
        a user agent, its replacement."""
        await channel.run(identity, task_status=task_status)
        if not channel.lost:
            return
        t = self._of(target.name)
        t.stuck += 1
        if slot.channel is channel:
            slot.channel = None
        await self._bury(target, identity, channel)
        if slot is t.user and self.mode(target) != "ssh":
            self._start_boot(target, identity)  # a root agent is started again by its next command

    async def _bury(self, target: TargetSpec, identity: TargetIdentity, channel: AgentChannel) -> None:
        """``kill -KILL`` the stuck agent on the target: one short command over the master, bounded, best
        effort. A stopped agent cannot act on its stdin closing; left alone it would stay forever."""
        request = stuck_kill(channel)
        if request is None:
            return
        with anyio.move_on_after(KILL_LIMIT_S + self._settings.connect_timeout_s + _LOCAL_GRACE_S):
            # a background task must not end RemoteOps: a failed kill leaves the agent to its session's end
            with contextlib.suppress(Exception):
                await self._ssh.execute(target, identity, request)

    async def _make_room(self, key: str) -> None:
        """Each channel keeps its master busy, so the pool could never evict it: at ``max_masters`` live
        channels on other masters, close the least recently used idle one first (the pool's LRU then may
        evict its master)."""
        others = [(s, c) for s, c in self._channels() if c.key != key and c.usable]
        if len({c.key for _, c in others}) < self._settings.max_masters:
            return
        idle = sorted(((s, c) for s, c in others if c.inflight == 0), key=lambda sc: sc[1].last_used)
        if idle:
            slot, victim = idle[0]
            slot.channel = None
            await victim.close()

    async def _reclaim_idle(self, key: str) -> None:
        """Every slot of ``key`` is taken and a session (ssh command, transfer, another channel) wants one:
        an idle channel on that identity closes and gives its slot back; it starts again on demand."""
        for slot, channel in list(self._channels()):
            if channel.key == key and channel.inflight == 0 and channel.usable:
                slot.channel = None
                await channel.close()
                return

    async def aclose(self) -> None:
        """Close every channel (their agents kill what they started and exit); shielded and bounded."""
        with anyio.CancelScope(shield=True):
            self._closing = True
            channels = [channel for _, channel in self._channels()]
            for slot, _ in list(self._channels()):
                slot.channel = None
            async with anyio.create_task_group() as tg:
                for channel in channels:
                    tg.start_soon(channel.close)
