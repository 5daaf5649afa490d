"""The ssh carrier: one OpenSSH client process per call over the master pool (``_render``'s wrapper on the
far side). Also the fallback of the agent carrier for targets without a usable ``python3``.

A kill (cancellation, the local ceiling, or the check after a remote time limit) runs one more small script
over the same master: it SIGKILLs the wrapper's session and every process whose environment carries the
call's ``ROG_CALL`` marker (descendants that left the session: ``setsid``, double fork; found through
``/proc/*/environ``, so only processes of the login user), then confirms none is left. ``remote_killed`` is
true only when that confirmation succeeded.

A privileged request (``request.escalation``) is rendered behind its provider; for a password provider
stdin is fed by ``_privilege_wire.feed_after_prompt`` (password only after the prompt, payload only after
the start). What sudo/su print before the command starts is not part of the result; a command that never
started because escalation failed is a :class:`PrivilegeError` (wrong password, refused, not uid 0).
The kill script runs through the same provider when that needs no password; behind a password provider it
runs as the login user and cannot reach root's processes: the command's remote time limit (``timeout``, run
as root inside the wrapper) still ends it.
"""

from __future__ import annotations

import time

import anyio

from remoteops._capture import HeadTail
from remoteops._errors import CommandTimeout, ConnectError, RemoteShellError, TransportError, TransportLost
from remoteops._exec import ExecRequest, RawExec, RawStream
from remoteops._models import TargetIdentity
from remoteops._process import ProcessOutcome, StdinFeeder, run_process
from remoteops._render import MARKER_ALLOWANCE, RenderedCommand, parse_markers, render_command
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.privilege.diagnose import strip_lecture, sudo_refusal
from remoteops.privilege.errors import PrivilegeError
from remoteops.privilege.wire import AuthWatch, Escalation, feed_after_prompt, split_pre_start
from remoteops.ssh.args import SshArgs, classify_ssh_failure, is_mux_presession_failure
from remoteops.ssh.master import Master
from remoteops.ssh.pool import MasterPool

__all__ = ["SshProcessCarrier"]

_TIMEOUT_CODES = frozenset({124, 137, 143})
_KILL_S = 5.0
_LOCAL_GRACE_S = 5.0
_SWEEP_AFTER_S = 2.0  # after limit + kill_after: `timeout` has returned and the wrapper printed its marker
# Only a direct connection does key exchange; a mux client reaches it only through its (blocked) fallback.
_MUX_FALLBACK = "kex_exchange_identification"
# sudo's answers after a correct password that still refuse (not a wrong password)
_NOT_PERMITTED = ("is not in the sudoers file", "is not allowed to execute", "may not run sudo")
# $1: pgrep pattern of the wrapper's nonce, $2: grep pattern of ROG_CALL=<nonce> (both bracketed, so that
# this script's own command line never matches them).
_KILL_SCRIPT = r"""marked() {
  grep -l -a -E -- "$2" /proc/[0-9]*/environ 2>/dev/null | sed -n 's#^/proc/\([0-9]*\)/environ$#\1#p'
}
wrapper() { command -v pgrep >/dev/null 2>&1 && pgrep -f -- "$1"; }
for p in $(wrapper "$1"); do pkill -KILL -s "$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
for p in $(marked "$1" "$2"); do kill -KILL "$p" 2>/dev/null; done
i=0
while [ "$i" -lt 40 ]; do
  left=$( { wrapper "$1"; marked "$1" "$2"; } | grep -v -x -e "$$" | sort -u | tr '\n' ' ')
  [ -z "${left% }" ] && exit 0
  sleep 0.05; i=$((i + 1))
done
echo "$left"
exit 1
"""


class _MuxNotOpened(Exception):
    """The multiplexed session was provably never opened; nothing ran."""


def _escalation_failure(
    target: str, esc: Escalation, pre: bytes, rendered: RenderedCommand, watch: AuthWatch | None
) -> PrivilegeError:
    """Escalation never started the command: say why, without quoting anything that was typed."""
    provider = esc.provider
    if rendered.not_root_marker in pre:
        return PrivilegeError(
            f"{provider} did not give uid 0 on {target}; nothing was started",
            target=target,
            reason="not_root",
            provider=provider,
        )
    said = strip_lecture(pre.replace(esc.prompt_bytes, b"").decode(errors="replace"))[-300:]
    refusal = sudo_refusal(said)
    if refusal is not None and refusal.kind == "account" and watch is not None and watch.rejected:
        refusal = None  # a second prompt: the password was wrong, whatever PAM added
    if refusal is not None and refusal.kind == "tty_required":
        return PrivilegeError(
            f"{provider} on {target}: {refusal.advice}; nothing was started (sudo said: {refusal.said})",
            target=target,
            reason="tty_required",
            provider=provider,
        )
    if refusal is not None and refusal.kind in ("account", "not_permitted"):
        return PrivilegeError(
            f"{provider} refused on {target}: {refusal.advice} (it said: {refusal.said})",
            target=target,
            reason="refused",
            provider=provider,
        )
    if any(phrase in said for phrase in _NOT_PERMITTED):
        return PrivilegeError(
            f"{provider} refused on {target}: {said}", target=target, reason="refused", provider=provider
        )
    if watch is not None and watch.password_sent:
        return PrivilegeError(
            f"{provider}: the password was not accepted on {target}; nothing was started",
            target=target,
            reason="wrong_password",
            provider=provider,
        )
    if watch is not None and watch.stalled:
        return PrivilegeError(
            f"{provider}: no password prompt appeared on {target}; nothing was started",
            target=target,
            reason="no_prompt",
            provider=provider,
        )
    return PrivilegeError(
        f"{provider} refused on {target}: {said or 'no reason given'}",
        target=target,
        reason="refused",
        provider=provider,
    )


def _bracketed(text: str) -> str:
    return f"[{text[0]}]{text[1:]}"


class SshProcessCarrier:
    def __init__(self, settings: TransportSettings, pool: MasterPool) -> None:
        self._settings = settings
        self._pool = pool
        self._args = SshArgs(settings)

    async def execute(self, target: TargetSpec, identity: TargetIdentity, request: ExecRequest) -> RawExec:
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

    async def _attempt(self, target: TargetSpec, master: Master | None, request: ExecRequest) -> RawExec:
        s = self._settings
        rendered = render_command(
            request.argv,
            time_limit_s=request.time_limit_s,
            kill_after_s=s.kill_after_s,
            cwd=request.cwd,
            env=request.env,
            escalation=request.escalation,
        )
        out = HeadTail(request.head_cap, request.tail_cap)
        esc = request.escalation
        watch: AuthWatch | None = None
        stdin: bytes | StdinFeeder | None = request.stdin
        if esc is not None and esc.needs_password:
            watch = AuthWatch(
                request.head_cap + MARKER_ALLOWANCE,
                request.tail_cap + MARKER_ALLOWANCE,
                prompt=esc.prompt_bytes,
                start_marker=rendered.start_marker,
            )
            err: HeadTail = watch
            auth_watch, secret, payload = watch, request.secret, request.stdin
            wait_s = s.connect_timeout_s + esc.wait_s

            async def feeder(stream: anyio.abc.ByteSendStream) -> None:
                await feed_after_prompt(stream, auth_watch, secret, payload, wait_s=wait_s)

            stdin = feeder
        else:
            err = HeadTail(request.head_cap + MARKER_ALLOWANCE, request.tail_cap + MARKER_ALLOWANCE)
        ceiling = request.time_limit_s + s.kill_after_s + _LOCAL_GRACE_S
        if master is None:
            ceiling += s.connect_timeout_s
        started = time.monotonic()
        outcome: ProcessOutcome | None = None
        remote_killed = False
        sweep: list[tuple[bool, tuple[int, ...]]] = []

        async def watchdog() -> None:
            # By now `timeout` has stopped the command's group; what still runs (descendants that left the
            # session, holding the output pipes and with them the ssh session) is swept by marker.
            await anyio.sleep(request.time_limit_s + s.kill_after_s + _SWEEP_AFTER_S)
            sweep.append(await self._remote_kill(target, master, rendered, esc))

        argv = self._argv(target, master, rendered.text)
        with anyio.move_on_after(ceiling) as scope:
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watchdog)
                    outcome = await run_process(argv, stdin=stdin, stdout=out, stderr=err)
                    tg.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    remote_killed, _ = await self._remote_kill(target, master, rendered, esc)
                raise
        if outcome is None or scope.cancelled_caught:
            raise CommandTimeout(
                f"no clean end within {ceiling:.1f}s",
                target=target.name,
                time_limit_s=request.time_limit_s,
                remote_killed=remote_killed,
            )
        duration_s = time.monotonic() - started
        head = err.head
        if esc is not None:  # what sudo/su printed before the command started is not the command's
            pre, head = split_pre_start(head, rendered.start_marker)
            if not head and err.gap == 0:  # never started: everything was before
                pre, head = pre + err.tail, b""
            if not head and outcome.returncode != 255:
                raise _escalation_failure(target.name, esc, pre, rendered, watch)
        markers = parse_markers(rendered, head, err.tail, err.gap)
        exit_code = markers.exit_code
        if exit_code is None:
            stderr_text = (markers.head + markers.tail).decode(errors="replace")
            exit_code = await self._no_end_marker(
                target, master, outcome.returncode, markers.started, stderr_text
            )
        timed_out = exit_code in _TIMEOUT_CODES and duration_s >= request.time_limit_s
        survivors: tuple[int, ...] = ()
        if timed_out and sweep:
            remote_killed, survivors = sweep[0]
        elif timed_out:  # `timeout` stopped its process group; descendants that left it are checked here
            with anyio.CancelScope(shield=True):
                remote_killed, survivors = await self._remote_kill(target, master, rendered, esc)
        return RawExec(
            exit_code=exit_code,
            stdout=RawStream(out.head, out.tail, out.gap),
            stderr=RawStream(markers.head, markers.tail, markers.gap),
            duration_s=duration_s,
            carrier="ssh",
            timed_out=timed_out,
            remote_killed=remote_killed,
            multiplexed=master is not None,
            survivors=survivors,
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

    async def _remote_kill(
        self,
        target: TargetSpec,
        master: Master | None,
        victim: RenderedCommand,
        escalation: Escalation | None = None,
    ) -> tuple[bool, tuple[int, ...]]:
        """Best effort, bounded: kill what ``victim`` started on the target (its session and every process
        carrying its marker). Returns (confirmed gone, pids seen surviving)."""
        script = ["sh", "-c", _KILL_SCRIPT, "rog-kill", _bracketed(victim.nonce)]
        script.append("ROG_CALL=" + _bracketed(victim.nonce))
        esc = escalation if escalation is not None and not escalation.needs_password else None
        rendered = render_command(script, time_limit_s=_KILL_S, escalation=esc)
        use = master if master is not None and master.alive else None
        with anyio.move_on_after(_KILL_S + 5):
            outcome = await run_process(
                self._argv(target, use, rendered.text),
                stdin=None,
                stdout=HeadTail(4096, 0),
                stderr=HeadTail(4096, 0),
            )
            markers = parse_markers(rendered, outcome.stderr.head, b"", 0)
            if markers.exit_code == 0:
                return True, ()
            survivors = tuple(int(w) for w in outcome.stdout.head.split() if w.isdigit())
            return False, survivors
        return False, ()
