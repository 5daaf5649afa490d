"""What the agent carrier keeps per target: one :class:`TargetAgents` holding its user agent's
:class:`Slot`, its root agent's, and the user agent's background boot; the state it reports
(:func:`carrier_state`), and the one command that kills a stuck agent (:func:`stuck_kill`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from remoteops._exec import CarrierName, ExecRequest
from remoteops._models import CarrierState
from remoteops._settings import CarrierMode
from remoteops.agent.channel import AgentChannel

__all__ = ["KILL_LIMIT_S", "Slot", "TargetAgents", "carrier_state", "stuck_kill"]

KILL_LIMIT_S = 5.0
# the stuck agent, only if that pid still is this agent (its loader's argv holds the boot's nonce)
_KILL_STUCK = (
    'if [ -r "/proc/$1/cmdline" ]; then grep -qa -- "$2" "/proc/$1/cmdline" || exit 0; fi; kill -KILL "$1"'
)


@dataclass
class Slot:
    """One agent of a target (its user agent, or its root agent) and what the carrier knows of it."""

    channel: AgentChannel | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # single flight: one start at a time
    failure: tuple[float, BaseException] | None = None  # the last start's failure, shared by its waiters
    started: int = 0
    used: CarrierName | None = None  # the carrier of its last command
    fallback: str | None = None  # why its commands use ssh

    def live(self) -> AgentChannel | None:
        channel = self.channel
        return channel if channel is not None and channel.usable else None


@dataclass
class TargetAgents:
    user: Slot = field(default_factory=Slot)
    root: Slot = field(default_factory=Slot)
    booting: anyio.Event | None = None  # the user agent's background boot, set when it ended
    boot_failed: float | None = None
    boot_error: str | None = None
    stuck: int = 0  # agents found stuck by their liveness probe (killed and replaced)


def carrier_state(mode: CarrierMode, current: CarrierName | None, t: TargetAgents) -> CarrierState:
    channel, root = t.user.live(), t.root.live()
    return CarrierState(
        mode=mode,
        carrier=current,
        reason="carrier = ssh" if mode == "ssh" else (t.user.fallback or t.boot_error),
        agent_alive=channel is not None,
        agent_pid=channel.pid if channel is not None else None,
        agent_python=str(channel.info.get("python")) if channel is not None else None,
        agent_build=channel.build if channel is not None else None,
        channels_started=t.user.started,
        requests_in_flight=channel.inflight if channel is not None else 0,
        agents_stuck=t.stuck,
        root_carrier=t.root.used,
        root_agent_pid=root.pid if root is not None else None,
        root_agent_build=root.build if root is not None else None,
        root_channels_started=t.root.started,
    )


def stuck_kill(channel: AgentChannel) -> ExecRequest | None:
    """The command that ends ``channel``'s stuck agent on the target (``kill -KILL`` of its HELLO pid; a
    root agent through the same provider), or None when there is none to send: no pid, or a root agent
    behind a password provider (its password was used once; it is left to its session's end)."""
    pid = channel.pid
    escalation = None if channel.root is None else channel.root.boot.escalation
    if pid is None or (escalation is not None and escalation.needs_password):
        return None
    argv = ("sh", "-c", _KILL_STUCK, "rog-kill", str(pid), channel.boot.nonce)
    return ExecRequest(argv=argv, time_limit_s=KILL_LIMIT_S, escalation=escalation)
