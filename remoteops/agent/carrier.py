"""The agent carrier: per target one long-lived agent channel carrying every command; ssh where it cannot.

Choice per target (``TargetSpec.carrier``, else ``TransportSettings.carrier``):

* ``ssh`` — always one OpenSSH process per call (:class:`SshProcessCarrier`);
* ``agent`` — always the agent; a target that cannot run it is ``MissingCapability``;
* ``auto`` — the agent; a target without a usable ``python3`` (absent, older than 3.8, refused) or with an
  agent that speaks another protocol falls back to ssh, recorded with the reason (``state``) until
  ``forget`` (``capabilities(refresh=True)``) lets the next call try again. Calls never wait for an agent
  to boot: while it boots in the background (first use of a target, or after its channel died) they go
  over ssh, so a cold target's first call costs what it costs on the ssh carrier.

Channels start lazily and single-flight (concurrent first callers wait for one start, and share its
failure), are replaced when they die or when the target's ``ssh -G`` identity changes, close themselves after
``agent_idle_s`` without requests, and are all closed by :meth:`AgentCarrier.aclose`. Host-key, auth and
connect failures come from the same pool and classification as the ssh carrier.

Privileged requests (``request.escalation``) go over ssh behind their provider, unless the operator enabled
the root agent (``PrivilegeSettings.agent``): then a separate per-target root agent channel, started through
that provider (a password provider's password entered once, at its boot) and proved uid 0
(``_agent_root``), carries them, with the same lazy start, single flight, idle close, replacement and
``aclose`` as the user channels.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.abc

from remoteops._errors import CommandTimeout, ConnectError, MissingCapability, RemoteOpsError
from remoteops._exec import CarrierName, ExecRequest, RawExec
from remoteops._models import CarrierState, TargetIdentity
from remoteops._settings import CarrierMode, TargetSpec, TransportSettings
from remoteops.agent.boot import AgentUnavailable, MasterGone
from remoteops.agent.channel import AgentChannel, AgentRefused, ChannelGone
from remoteops.agent.exec import KillReport
from remoteops.privilege.errors import PrivilegeError
from remoteops.privilege.wire import Escalation, OneTimeSecret
from remoteops.ssh.carrier import SshProcessCarrier
from remoteops.ssh.pool import MasterPool

__all__ = ["AgentCarrier"]

_LOCAL_GRACE_S = 5.0
_FRESH_CHANNEL_TRIES = 3
_ROOT_MIN_SLOTS = 3  # a root agent leaves a slot for ssh calls beside the user agent


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
        self._channels: dict[str, AgentChannel] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._failures: dict[str, tuple[float, BaseException]] = {}
        self._fallback: dict[str, str] = {}  # target name -> why it uses ssh
        self._used: dict[str, CarrierName] = {}  # target name -> the carrier of its last command
        self._started: dict[str, int] = {}
        self._booting: dict[str, anyio.Event] = {}  # target name -> set when its background boot ended
        self._boot_failed: dict[str, float] = {}
        self._boot_error: dict[str, str] = {}
        self._root: dict[str, AgentChannel] = {}  # target name -> its root agent channel
        self._root_started: dict[str, int] = {}
        self._root_used: dict[str, CarrierName] = {}  # target name -> the carrier of its last root command
        self._root_fallback: dict[str, str] = {}  # target name -> why its root commands use ssh
        pool.reclaim = self._reclaim_idle

    # -- choice and state ---------------------------------------------------------------------------
    def mode(self, target: TargetSpec) -> CarrierMode:
        return target.carrier or self._settings.carrier

    def current(self, target: TargetSpec) -> CarrierName | None:
        """The carrier the target's next command takes (None: not decided yet)."""
        if self.mode(target) == "ssh" or target.name in self._fallback:
            return "ssh"
        channel = self._channels.get(target.name)
        if channel is not None and channel.usable:
            return "agent"
        return self._used.get(target.name)

    def state(self, target: TargetSpec) -> CarrierState:
        channel = self._channels.get(target.name)
        alive = channel is not None and channel.usable
        reason = self._fallback.get(target.name) or self._boot_error.get(target.name)
        if self.mode(target) == "ssh":
            reason = "carrier = ssh"
        root = self._root.get(target.name)
        return CarrierState(
            mode=self.mode(target),
            carrier=self.current(target),
            reason=reason,
            agent_alive=alive,
            agent_pid=channel.pid if channel is not None and alive else None,
            agent_python=str(channel.info.get("python")) if channel is not None and alive else None,
            channels_started=self._started.get(target.name, 0),
            requests_in_flight=channel.inflight if channel is not None and alive else 0,
            root_carrier=self._root_used.get(target.name),
            root_agent_pid=root.pid if root is not None and root.usable else None,
            root_channels_started=self._root_started.get(target.name, 0),
        )

    def forget(self, name: str) -> None:
        """Let the next command try the agent again (after a fallback to ssh)."""
        self._fallback.pop(name, None)
        self._failures.pop(name, None)
        self._root_fallback.pop(name, None)
        self._failures.pop(_root_slot(name), None)

    # -- exec ---------------------------------------------------------------------------------------
    async def execute(self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest) -> RawExec:
        mode = self.mode(target)
        if request.escalation is not None:  # privileged: behind its provider, on the root agent if enabled
            if self._root_agent_for(target, request.escalation):
                return await self._as_root(target, identity, request, request.escalation)
            self._root_used[target.name] = "ssh"
            return await self._ssh.execute(target, identity, request)
        if mode == "ssh" or (mode == "auto" and target.name in self._fallback):
            return await self._via_ssh(target, identity, request)
        # A call can go over ssh while the agent boots only if the agent leaves it a channel slot.
        background = mode == "auto" and self._settings.max_channels_per_target > 1
        for _attempt in range(_FRESH_CHANNEL_TRIES):
            if background:
                ready = await self._ready_channel(target, identity)
                if ready is None:  # the agent boots in the background; this call does not wait for it
                    return await self._via_ssh(target, identity, request)
                channel = ready
            else:
                try:
                    channel = await self._channel(target, identity)
                except AgentUnavailable as exc:
                    if mode == "auto":
                        self._fallback[target.name] = exc.reason
                        return await self._via_ssh(target, identity, request)
                    raise MissingCapability(
                        f"the agent cannot run on this target: {exc.reason}",
                        target=target.name,
                        capability=exc.capability,
                    ) from None
            self._used[target.name] = "agent"
            self._pool.counters["runs"] += 1
            try:
                return await self._on(channel, target, request)
            except ChannelGone:
                continue  # nothing of this request was written: a fresh channel may carry it
        raise ConnectError(
            "the agent channel closed before the request could be sent; nothing ran",
            target=target.name,
            stage="agent",
            reason="closed",
        )

    def _root_agent_for(self, target: TargetSpec, escalation: Escalation) -> bool:
        return (
            escalation.agent
            and self.mode(target) != "ssh"
            and target.name not in self._fallback
            and target.name not in self._root_fallback
            and self._settings.max_channels_per_target >= _ROOT_MIN_SLOTS
        )

    async def _as_root(
        self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest, escalation: Escalation
    ) -> RawExec:
        """One privileged command on the target's root agent (started through ``escalation``'s provider;
        a provider that refuses is the same ``PrivilegeError`` as on ssh, so the escalator goes on)."""
        name = target.name
        for _attempt in range(_FRESH_CHANNEL_TRIES):
            try:
                channel = await self._channel(target, identity, escalation, request.secret)
            except AgentUnavailable as exc:  # python cannot run as root there: this target's root uses ssh
                if self.mode(target) == "agent":
                    raise MissingCapability(
                        f"the root agent cannot run on this target: {exc.reason}",
                        target=name,
                        capability=exc.capability,
                    ) from None
                self._root_fallback[name] = exc.reason
                self._root_used[name] = "ssh"
                return await self._ssh.execute(target, identity, request)
            if channel.uid != 0 or channel.provider != escalation.provider:  # proved at boot; never else
                raise PrivilegeError(
                    f"the root agent on {name} is not uid 0 through {escalation.provider}; nothing ran",
                    target=name,
                    reason="not_root",
                    provider=escalation.provider,
                )
            self._root_used[name] = "agent"
            self._pool.counters["runs"] += 1
            try:
                return await self._on(channel, target, request)
            except ChannelGone:
                continue  # nothing of this request was written: a fresh root agent may carry it
        raise ConnectError(
            "the root agent channel closed before the request could be sent; nothing ran",
            target=name,
            stage="agent",
            reason="closed",
        )

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
        reason = self._fallback.get(target.name)
        if reason is not None:
            raise MissingCapability(
                f"this operation needs the agent, which cannot run on this target: {reason}",
                target=target.name,
                capability="python3 (>= 3.8) for the agent",
            )
        for _attempt in range(_FRESH_CHANNEL_TRIES):
            try:
                channel = await self._channel(target, identity)
            except AgentUnavailable as exc:
                if mode == "auto":
                    self._fallback[target.name] = exc.reason
                raise MissingCapability(
                    f"this operation needs the agent, which cannot run on this target: {exc.reason}",
                    target=target.name,
                    capability=exc.capability,
                ) from None
            self._used[target.name] = "agent"
            try:
                return await channel.request(kind, meta, data)
            except ChannelGone:
                continue
            except AgentRefused as exc:
                if exc.meta.get("code") == "unsupported":
                    raise MissingCapability(
                        "the agent on this target does not support this request",
                        target=target.name,
                        capability=f"agent request kind 0x{kind:02x}",
                    ) from None
                raise
        raise ConnectError(
            "the agent channel closed before the request could be sent; nothing was done",
            target=target.name,
            stage="agent",
            reason="closed",
        )

    async def _via_ssh(self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest) -> RawExec:
        self._used[target.name] = "ssh"
        return await self._ssh.execute(target, identity, request)

    async def _ready_channel(self, target: TargetSpec, identity: TargetIdentity) -> AgentChannel | None:
        """auto mode: the live channel, or None after making sure one boots in the background."""
        channel = self._channels.get(target.name)
        if (
            channel is not None
            and channel.key == self._pool.key_for(target, identity)
            and await channel.healthy()
        ):
            return channel
        name = target.name
        failed = self._boot_failed.get(name)
        recent = failed is not None and time.monotonic() - failed < self._settings.master_retry_after_s
        if name not in self._booting and not recent:
            self._booting[name] = anyio.Event()
            self._tg.start_soon(self._boot, target, identity)
        return None

    async def _boot(self, target: TargetSpec, identity: TargetIdentity) -> None:
        name = target.name
        try:
            await self._channel(target, identity)
            self._boot_failed.pop(name, None)
            self._boot_error.pop(name, None)
        except AgentUnavailable as exc:
            self._fallback[name] = exc.reason
        except Exception as exc:  # a background task must not end RemoteOps
            # the ssh path meets (and reports) transport failures itself; retried after a pause
            self._boot_failed[name] = time.monotonic()
            self._boot_error[name] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            self._booting.pop(name).set()

    async def settle(self, target: TargetSpec, identity: TargetIdentity) -> CarrierState:
        """Make the target's carrier ready (start or wait for its agent per mode) and return its state."""
        mode = self.mode(target)
        if mode == "agent":
            # A channel that passed its health check can still end a moment later (its agent was killed and
            # the EOF had not arrived yet): a fresh one is started, a bounded number of times.
            for _attempt in range(_FRESH_CHANNEL_TRIES):
                try:
                    channel = await self._channel(target, identity)
                except (AgentUnavailable, RemoteOpsError):
                    break
                if channel.usable:
                    break
        elif mode == "auto" and target.name not in self._fallback:
            await self._ready_channel(target, identity)
            booting = self._booting.get(target.name)
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
        channel = self._root.get(name)
        return channel.provider if channel is not None and channel.usable else None

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
        channels, started = (
            (self._channels, self._started) if escalation is None else (self._root, self._root_started)
        )
        slot = name if escalation is None else _root_slot(name)
        channel = channels.get(name)
        if (
            channel is not None
            and channel.key == key
            and channel.provider == provider
            and await channel.healthy()
        ):
            return channel
        asked = time.monotonic()
        lock = self._locks.setdefault(slot, anyio.Lock())
        async with lock:  # single flight: one start per target (and kind) at a time, its failure shared
            channel = channels.get(name)
            if channel is not None and channel.usable and channel.key == key and channel.provider == provider:
                return channel
            if channel is not None:
                channels.pop(name, None)
                await channel.close()  # dead, or the identity (or the root provider) changed
            failure = self._failures.get(slot)
            if failure is not None and failure[0] >= asked:
                raise failure[1]
            if escalation is not None and escalation.needs_password and (secret is None or secret.used):
                raise PrivilegeError(  # the live root agent it was meant for ended just now
                    f"the root agent through {escalation.provider} on {name} ended before this command was "
                    "sent; nothing ran, and the next call asks for the password again",
                    target=name,
                    reason="refused",
                    provider=escalation.provider,
                )
            await self._make_room(key)
            for _attempt in range(2):
                channel = AgentChannel(target, key, self._settings, self._pool, escalation, secret)
                try:
                    await self._tg.start(channel.run, identity)
                except MasterGone:
                    continue  # the master died under us; the pool makes a fresh one
                except (RemoteOpsError, AgentUnavailable) as exc:
                    self._failures[slot] = (time.monotonic(), exc)
                    raise
                self._failures.pop(slot, None)
                channels[name] = channel
                started[name] = started.get(name, 0) + 1
                return channel
            raise ConnectError(
                "the master refused the agent session twice",
                target=target.name,
                stage="agent",
                reason="multiplex",
            )

    async def _make_room(self, key: str) -> None:
        """Each channel keeps its master busy, so the pool could never evict it: at ``max_masters`` live
        channels on other masters, close the least recently used idle one first (the pool's LRU then may
        evict its master)."""
        live = (*self._channels.values(), *self._root.values())
        others = [c for c in live if c.key != key and c.usable]
        if len({c.key for c in others}) < self._settings.max_masters:
            return
        idle = sorted((c for c in others if c.inflight == 0), key=lambda c: c.last_used)
        if idle:
            victim = idle[0]
            for channels in (self._channels, self._root):
                if channels.get(victim.target.name) is victim:
                    channels.pop(victim.target.name)
            await victim.close()

    async def _reclaim_idle(self, key: str) -> None:
        """Every slot of ``key`` is taken and a session (ssh command, transfer, another channel) wants one:
        an idle channel on that identity closes and gives its slot back; it starts again on demand."""
        for channels in (self._channels, self._root):
            for name, channel in list(channels.items()):
                if channel.key == key and channel.inflight == 0 and channel.usable:
                    channels.pop(name)
                    await channel.close()
                    return

    async def aclose(self) -> None:
        """Close every channel (their agents kill what they started and exit); shielded and bounded."""
        with anyio.CancelScope(shield=True):
            channels = [*self._channels.values(), *self._root.values()]
            self._channels, self._root = {}, {}
            async with anyio.create_task_group() as tg:
                for channel in channels:
                    tg.start_soon(channel.close)


def _root_slot(name: str) -> str:
    """The lock and failure key of a target's root channel (target names hold no NUL)."""
    return f"{name}\0root"
