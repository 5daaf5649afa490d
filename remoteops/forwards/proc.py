"""The process behind a forward: its ssh argv, its confirmed start, its identity, its identity-safe stop.

**Start.** Each forward is a dedicated ``ssh -f -N -o ExitOnForwardFailure=yes`` connection, built by the
same :class:`SshArgs` as every other ssh call (``-F``, BatchMode, ConnectTimeout, ServerAlive*, the
host-key policy). ``-f`` with ``ExitOnForwardFailure`` is the confirmation: ssh forks into the
background only after it authenticated, bound every local listener and got the server's reply for every
remote one, so the launching ssh exiting 0 *is* the confirmed start, and exiting 255 is a clean failure
(the reason is in its log). The wait is bounded (``start_timeout_s``); past it everything started is
stopped. It deliberately does not ride on the pool's ControlMaster: a master forward lives and dies with
that master (idle expiry, eviction, the gateway's shutdown), while a forward must outlive the gateway.
``ClearAllForwardings`` (which the builder sets for ordinary calls) would clear the command line's
forward too, so it is left out here; forwards from the operator's ssh configuration for that host then
also apply — and with ``ExitOnForwardFailure`` one that cannot bind fails the start visibly.

**Ownership.** The daemonized ssh calls ``setsid`` and is re-parented away from the gateway: it is in no
process group of the gateway and survives a gateway restart, even ``kill -9``. Its stdio is /dev/null and
it logs to its own ``-E`` file, so no pipe ties it to the gateway. That log path holds the forward's id,
which makes the argv unique: the daemon is found by its exact ``/proc/PID/cmdline``.

**Identity.** PID, start time (``/proc/PID/stat`` field 22), boot id and the exact argv. Stopping opens
a pidfd, re-checks the identity through it, sends SIGTERM through the pidfd (a pidfd never reaches a
recycled PID), waits (bounded) for the pidfd to become readable, re-checks the identity again and only
then sends SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Literal

import anyio

from remoteops._process import terminate_group
from remoteops._settings import TargetSpec
from remoteops.forwards.models import ForwardSpec, ProcessIdentity
from remoteops.ssh.args import SshArgs

__all__ = [
    "ForwardArgs",
    "StopOutcome",
    "find_by_argv",
    "identity_alive",
    "identity_of",
    "launch",
    "stop_process",
]

_KILL_WAIT_S = 5.0
StopOutcome = Literal["terminated", "killed", "not_running", "identity_mismatch", "survived"]


def _hostport(address: str, port: int) -> str:
    host = address.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ForwardArgs(SshArgs):
    def forward(self, target: TargetSpec, spec: ForwardSpec, bind_port: int, log_path: Path) -> list[str]:
        options = self._connect_options(target)
        keep: list[str] = []
        for flag, value in zip(options[::2], options[1::2], strict=True):
            if value != "ClearAllForwardings=yes":
                keep += [flag, value]
        listen = _hostport(spec.bind_address, bind_port)
        if spec.kind == "dynamic":
            option = ["-D", listen]
        else:
            if spec.dest_host is None or spec.dest_port is None:
                raise ValueError(f"a {spec.kind} forward needs dest_host and dest_port")
            option = [
                "-L" if spec.kind == "local" else "-R",
                f"{listen}:{_hostport(spec.dest_host, spec.dest_port)}",
            ]
        return [
            *self._base(), *keep, *self._target(target),
            "-f", "-N", "-n", "-T",
            "-o", "ExitOnForwardFailure=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none",
            "-o", "PermitLocalCommand=no", "-E", str(log_path),
            *option, "--", target.host,
        ]  # fmt: skip


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start_ticks) of ``pid``, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # fields from 3 on; the comm may hold spaces
    return fields[0], int(fields[19])


def _cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1])


def identity_of(pid: int) -> ProcessIdentity | None:
    stat = _stat(pid)
    argv = _cmdline(pid)
    if stat is None or argv is None or stat[0] in ("Z", "X"):
        return None
    return ProcessIdentity(pid=pid, start_ticks=stat[1], boot_id=_boot_id(), argv=argv)


def identity_alive(identity: ProcessIdentity) -> bool | None:
    """True: that very process runs. False: it is gone. None: the PID now belongs to another process."""
    current = identity_of(identity.pid)
    if current is None:
        return False
    return True if current == identity else None


def find_by_argv(argv: list[str]) -> list[int]:
    """Every live process whose cmdline is exactly ``argv`` (blocking: run it in a worker thread)."""
    wanted = tuple(argv)
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _cmdline(int(entry.name)) == wanted:
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


async def launch(argv: list[str]) -> int:
    """Run the launching ssh to its end (the caller bounds the wait); its exit status.

    On cancellation or timeout the launcher's group is stopped and any daemon it already forked (found by
    its exact argv) is killed, so nothing is left running."""
    proc = await anyio.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        return await proc.wait()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await terminate_group(proc, grace_s=1.0)
            for pid in await anyio.to_thread.run_sync(find_by_argv, argv):
                identity = identity_of(pid)
                if identity is not None:
                    await stop_process(identity, grace_s=1.0)
        raise


def _pidfd(identity: ProcessIdentity) -> int | None:
    """A pidfd for the recorded process, or None when it is gone or the PID is someone else's now."""
    try:
        fd = os.pidfd_open(identity.pid)
    except ProcessLookupError:
        return None
    if identity_alive(identity) is not True:  # checked after opening: the fd pins the process we checked
        os.close(fd)
        return None
    return fd


async def _exited(fd: int, limit_s: float) -> bool:
    exited = False
    with anyio.move_on_after(limit_s):
        await anyio.wait_readable(fd)  # a pidfd turns readable when its process exits
        exited = True
    return exited


async def stop_process(identity: ProcessIdentity, *, grace_s: float) -> StopOutcome:
    """SIGTERM → bounded wait → (identity re-checked) SIGKILL; never signals a recycled PID. Shielded."""
    outcome: StopOutcome = "survived"
    with anyio.CancelScope(shield=True):
        outcome = await _stop(identity, grace_s)
    return outcome


async def _stop(identity: ProcessIdentity, grace_s: float) -> StopOutcome:
    alive = identity_alive(identity)
    if alive is None:
        return "identity_mismatch"
    if alive is False:
        return "not_running"
    fd = _pidfd(identity)
    if fd is None:
        return "identity_mismatch" if identity_alive(identity) is None else "not_running"
    try:
        try:
            signal.pidfd_send_signal(fd, signal.SIGTERM)
        except ProcessLookupError:
            return "not_running"
        if await _exited(fd, grace_s):
            return "terminated"
        again = identity_alive(identity)  # checked again before the harder signal
        if again is not True:
            return "terminated" if again is False else "identity_mismatch"
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        return "killed" if await _exited(fd, _KILL_WAIT_S) else "survived"
    finally:
        os.close(fd)
