"""The exec seam: "run this argv on this target with this stdin, give me stdout/stderr/exit".

:class:`Carrier` is the narrow interface everything above (files, tasks, tools) uses. A carrier returns a
:class:`RawExec` — raw bytes (head and tail of each stream, bounded by the request's cap) and a raw record;
decoding, the final clipping and presentation (:func:`present` → :class:`ExecResult`) happen above it.
Two carriers exist: :class:`remoteops.ssh.carrier.SshProcessCarrier` (one OpenSSH client process per call over
the master pool) and :class:`remoteops.agent.carrier.AgentCarrier` (one long-lived agent per target,
many calls over it; it falls back to the former where a target has no usable ``python3``).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from remoteops._capture import clip
from remoteops._models import ExecResult, TargetIdentity
from remoteops._settings import TargetSpec
from remoteops.privilege.wire import Escalation, OneTimeSecret

__all__ = ["Carrier", "CarrierName", "ExecRequest", "RawExec", "RawStream", "present", "signal_name"]

CarrierName = Literal["agent", "ssh"]

_SIGNALS = {int(s): s.name.removeprefix("SIG") for s in signal.Signals}


def signal_name(number: int) -> str | None:
    return _SIGNALS.get(number)


@dataclass(frozen=True)
class ExecRequest:
    argv: tuple[str, ...]
    time_limit_s: float
    stdin: bytes | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    output_cap_bytes: int = 64 * 1024  # per stream: head and tail kept, half each
    # the privilege choice point: None runs as the login user; otherwise the provider it is raised through
    # (rendered by ``render_command``; always carried by the ssh carrier) and, for a password provider,
    # the one-time secret written to stdin after the prompt
    escalation: Escalation | None = None
    secret: OneTimeSecret | None = field(default=None, repr=False, compare=False)

    @property
    def head_cap(self) -> int:
        return self.output_cap_bytes // 2

    @property
    def tail_cap(self) -> int:
        return self.output_cap_bytes - self.output_cap_bytes // 2


@dataclass(frozen=True)
class RawStream:
    """What a carrier kept of one output stream: its first and last bytes and how many it dropped between."""

    head: bytes
    tail: bytes
    dropped: int = 0


@dataclass(frozen=True)
class RawExec:
    """A carrier's raw record of one command. ``exit_code`` keeps the shell's ``128+N`` convention for a
    command killed by signal N; ``signal`` is set when the carrier saw the signal itself."""

    exit_code: int
    stdout: RawStream
    stderr: RawStream
    duration_s: float
    carrier: CarrierName
    signal: str | None = None
    timed_out: bool = False
    remote_killed: bool = False
    multiplexed: bool = False
    survivors: tuple[int, ...] = ()  # remote pids still alive after a kill that could not be confirmed


class Carrier(Protocol):
    async def execute(
        self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest
    ) -> RawExec: ...


def present(target: str, raw: RawExec, cap: int) -> ExecResult:
    """Decode and clip a raw record into the public :class:`ExecResult` (text, replacement characters for
    bytes that are not UTF-8; the raw bytes stay available from ``RemoteOps.exec_raw``)."""
    stdout, stdout_dropped = clip(raw.stdout.head, raw.stdout.tail, raw.stdout.dropped, cap)
    stderr, stderr_dropped = clip(raw.stderr.head, raw.stderr.tail, raw.stderr.dropped, cap)
    sig = raw.signal
    if sig is None and raw.exit_code > 128:
        sig = signal_name(raw.exit_code - 128)
    return ExecResult(
        target=target,
        exit_code=raw.exit_code,
        signal=sig,
        stdout=stdout.decode(errors="replace"),
        stderr=stderr.decode(errors="replace"),
        stdout_truncated=stdout_dropped > 0,
        stderr_truncated=stderr_dropped > 0,
        stdout_dropped_bytes=stdout_dropped,
        stderr_dropped_bytes=stderr_dropped,
        duration_ms=round(raw.duration_s * 1000, 3),
        timed_out=raw.timed_out,
        remote_killed=raw.remote_killed,
        multiplexed=raw.multiplexed,
    )
