"""The exec seam: "run this argv on this target with this stdin, give me stdout/stderr/exit".

:class:`Carrier` is the narrow interface everything above (files, tasks, tools) uses.
:class:`SshProcessCarrier` implements it with one OpenSSH client process per call over the master pool; a
persistent per-target channel can implement the same protocol later without touching its callers.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from ._capture import HeadTail, clip
from ._errors import CommandTimeout, ConnectError, RemoteShellError, TransportError, TransportLost
from ._master import Master
from ._models import ExecResult, TargetIdentity
from ._pool import MasterPool
from ._process import ProcessOutcome, run_process
from ._render import MARKER_ALLOWANCE, RenderedCommand, parse_markers, render_command
from ._settings import TargetSpec, TransportSettings
from ._sshargs import SshArgs, classify_ssh_failure, is_mux_presession_failure

__all__ = ["Carrier", "ExecRequest", "SshProcessCarrier"]

_SIGNALS = {int(s): s.name.removeprefix("SIG") for s in signal.Signals}
_TIMEOUT_CODES = frozenset({124, 137, 143})
_KILL_S = 5.0
_LOCAL_GRACE_S = 5.0
# Only a direct connection does key exchange; a mux client reaches it only through its (blocked) fallback.
_MUX_FALLBACK = "kex_exchange_identification"
_KILL_SCRIPT = r"""pids=$(pgrep -f -- "$1") || exit 3
for p in $pids; do pkill -KILL -s "$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
if pgrep -f -- "$1" >/dev/null; then exit 1; fi
exit 0
"""


@dataclass(frozen=True)
class ExecRequest:
    argv: tuple[str, ...]
    time_limit_s: float
    stdin: bytes | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


class Carrier(Protocol):
    async def execute(
        self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest
    ) -> ExecResult: ...


class _MuxNotOpened(Exception):
    """The multiplexed session was provably never opened; nothing ran."""


class SshProcessCarrier:
    def __init__(self, settings: TransportSettings, pool: MasterPool) -> None:
        self._settings = settings
        self._pool = pool
        self._args = SshArgs(settings)

    async def execute(self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest) -> ExecResult:
        self._pool.counters["runs"] += 1
        for _attempt in range(2):
            async with self._pool.channel(target, identity) as master:
                try:
                    return await self._attempt(target, master, request)
                except _MuxNotOpened:
                    if master is None:
                        raise
                    if not master.alive:
                        await self._pool.invalidate(master)
                        continue  # safe: nothing was started; a fresh master is made on the next pass
                    if self._settings.multiplex == "auto":
                        self._pool.counters["fallbacks"] += 1
                        return await self._attempt(target, None, request)
                    raise ConnectError(
                        "the master refused the session", target=target.name, stage="exec", reason="multiplex"
                    ) from None
        raise ConnectError("no usable master", target=target.name, stage="exec", reason="multiplex")

    def _argv(self, target: TargetSpec, master: Master | None, remote: str) -> list[str]:
        if master is None:
            return self._args.oneshot(target, remote)
        return self._args.mux_client(target, master.control_path, remote)

    async def _attempt(self, target: TargetSpec, master: Master | None, request: ExecRequest) -> ExecResult:
        s = self._settings
        rendered = render_command(
            request.argv,
            time_limit_s=request.time_limit_s,
            kill_after_s=s.kill_after_s,
            cwd=request.cwd,
            env=request.env,
        )
        cap = s.output_cap_bytes
        out = HeadTail(cap // 2, cap - cap // 2)
        err = HeadTail(cap // 2 + MARKER_ALLOWANCE, cap - cap // 2 + MARKER_ALLOWANCE)
        ceiling = request.time_limit_s + s.kill_after_s + _LOCAL_GRACE_S
        if master is None:
            ceiling += s.connect_timeout_s
        started = time.monotonic()
        outcome: ProcessOutcome | None = None
        remote_killed = False
        with anyio.move_on_after(ceiling) as scope:
            try:
                outcome = await run_process(
                    self._argv(target, master, rendered.text), stdin=request.stdin, stdout=out, stderr=err
                )
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    remote_killed = await self._remote_kill(target, master, rendered)
                raise
        if outcome is None or scope.cancelled_caught:
            raise CommandTimeout(
                f"no clean end within {ceiling:.1f}s",
                target=target.name,
                time_limit_s=request.time_limit_s,
                remote_killed=remote_killed,
            )
        duration_s = time.monotonic() - started
        stdout, stdout_dropped = clip(out.head, out.tail, out.gap, cap)
        markers = parse_markers(rendered, err.head, err.tail, err.gap)
        stderr, stderr_dropped = clip(markers.head, markers.tail, markers.gap, cap)
        stderr_text = stderr.decode(errors="replace")
        exit_code = markers.exit_code
        if exit_code is None:
            exit_code = await self._no_end_marker(
                target, master, outcome.returncode, markers.started, stderr_text
            )
        timed_out = exit_code in _TIMEOUT_CODES and duration_s >= request.time_limit_s
        return ExecResult(
            target=target.name,
            exit_code=exit_code,
            signal=_SIGNALS.get(exit_code - 128) if exit_code > 128 else None,
            stdout=stdout.decode(errors="replace"),
            stderr=stderr_text,
            stdout_truncated=stdout_dropped > 0,
            stderr_truncated=stderr_dropped > 0,
            stdout_dropped_bytes=stdout_dropped,
            stderr_dropped_bytes=stderr_dropped,
            duration_ms=round(duration_s * 1000, 3),
            timed_out=timed_out,
            remote_killed=timed_out,
            multiplexed=master is not None,
        )

    async def _no_end_marker(
        self, target: TargetSpec, master: Master | None, returncode: int, started: bool, stderr: str
    ) -> int:
        """The wrapper did not report an exit status: decide what happened (or raise)."""
        if returncode != 255:
            if started:
                return returncode  # ssh relayed a status although the wrapper's marker is missing
            raise RemoteShellError(stderr.strip()[-600:], target=target.name, exit_code=returncode)
        if master is not None:
            if not started and (is_mux_presession_failure(stderr) or _MUX_FALLBACK in stderr):
                raise _MuxNotOpened
            await self._pool.invalidate(master)
            error: TransportError = TransportLost(
                stderr.strip()[-600:] or "the master connection was lost",
                target=target.name,
                stage="exec",
                command_started=True if started else None,
            )
        else:
            error = classify_ssh_failure(
                stderr, target=target.name, stage="exec", command_started=True if started else None
            )
        raise error

    async def _remote_kill(self, target: TargetSpec, master: Master | None, victim: RenderedCommand) -> bool:
        """Best effort, bounded: kill the session of the wrapper carrying ``victim``'s nonce on the target.
        True when the remote process is confirmed gone."""
        pattern = f"[{victim.nonce[0]}]{victim.nonce[1:]}"
        rendered = render_command(["sh", "-c", _KILL_SCRIPT, "rog-kill", pattern], time_limit_s=_KILL_S)
        use = master if master is not None and master.alive else None
        with anyio.move_on_after(_KILL_S + 5):
            outcome = await run_process(
                self._argv(target, use, rendered.text),
                stdin=None,
                stdout=HeadTail(4096, 0),
                stderr=HeadTail(4096, 0),
            )
            markers = parse_markers(rendered, outcome.stderr.head, b"", 0)
            return markers.exit_code in (0, 3)
        return False
