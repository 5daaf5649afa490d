"""The gateway under a real systemd, from the unit files in ``ops/`` (adapted by drop-ins, never copied).

In a systemd target (``tests/fixtures/systemd_target.py``: own PID/mount/network namespaces, RAM overlay over
``/``, read-only ``/proc/sys``, dedicated cgroup) the two units are installed verbatim, with the service users
created, ``/opt/remoteops-gateway`` and ``/opt/libtmux-mcp`` pointing at this checkout and its venv, and one
drop-in per unit: a short ``WatchdogSec`` for the test and ``ProtectHome=read-only`` (this venv's Python
lives under ``/root``; ``/root`` gets o+x in the overlay only). Then:

1. ``systemctl start remoteops-gateway`` returns only after ``READY=1`` (Type=notify); the STATUS text is
   systemd's; the terminal unit was started by ``Wants=`` and the gateway relays it;
2. over more than two ``WatchdogSec`` the gateway stays up on its ``WATCHDOG=1`` pings (the watchdog
   timestamp advances, no restart); ``remote_exec`` works from inside the sandbox: an sshd unit in the target,
   the service user's own key and known_hosts (made as the runbook makes them), one reused ControlMaster;
3. the gateway frozen with SIGSTOP is killed by systemd's watchdog within ``WatchdogSec`` and restarted;
   the terminal unit keeps its PID meanwhile; the new gateway relays again;
4. ``systemctl stop`` with a relayed call in flight: the call completes, the gateway exits 0.

Every check goes through ``check(condition, what)``; figures land in ``figures``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acceptance._service_probe import WAIT_S
from acceptance.harness.systemd_target import SystemdTarget, host_sysctls, systemd_target

__all__ = ["GATEWAY_UNIT", "TERMINAL_UNIT", "WATCHDOG_S", "checkout_unusable_reason", "run_service_scenario"]

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "ops"
GATEWAY_UNIT = "remoteops-gateway.service"
TERMINAL_UNIT = "remoteops-terminal-mcp.service"
WATCHDOG_S = 5
"""The drop-in's WatchdogSec. The gateway pings every WatchdogSec/2 after a /healthz answered within
min(WatchdogSec/2, 2 s): at 3 s a slow but successful check could land a ping right at the deadline."""
URL = "http://127.0.0.1:8765/mcp"
TOKEN = "var/lib/remoteops-gateway/token"

Check = Callable[[bool, str], None]

_GATEWAY_TOML = """\
state_dir = "/var/lib/remoteops-gateway"
[server]
host = "127.0.0.1"
port = 8765
drain_timeout_s = 10
[[upstreams]]
[upstreams.connection]
name = "tmux"
transport = "http"
url = "http://127.0.0.1:8766/mcp"
connect_timeout_s = 30
call_wait_s = 5
backoff_initial_s = 0.2
backoff_max_s = 1.0
[[targets]]
name = "box"
host = "127.0.0.1"
port = 2222
user = "ro-target"
"""

# An sshd inside the target (its own loopback) that the sandboxed gateway reaches with the service user's
# own key and known_hosts, made as ops/RUNBOOK.md makes them.
SSHD_UNIT = "acc-sshd.service"
_SSHD_CONFIG = """\
Port 2222
ListenAddress 127.0.0.1
HostKey /etc/ssh/acc_host_ed25519
PidFile /run/acc-sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AuthorizedKeysFile .ssh/authorized_keys
MaxSessions 10
"""
_SSHD_SERVICE = """\
[Unit]
Description=acceptance: an SSH target inside the systemd target
[Service]
ExecStartPre=/bin/mkdir -p /run/sshd
ExecStart=/usr/sbin/sshd -D -e -f /etc/ssh/acc_sshd_config
"""

EXIT_FILE = "run/acceptance-gateway-exit"
_DROPIN_GATEWAY = f"""\
# acceptance: a short watchdog; this checkout's Python lives under /root (pyenv): home read-only, not gone;
# how the main process ended, as systemd saw it ("+": outside the sandbox, which keeps /run read-only)
[Service]
WatchdogSec={WATCHDOG_S}
ProtectHome=read-only
ExecStopPost=+/bin/sh -c 'echo "$$SERVICE_RESULT $$EXIT_CODE $$EXIT_STATUS" > /{EXIT_FILE}'
"""

_DROPIN_TERMINAL = """\
# acceptance: this checkout's Python lives under /root (pyenv)
[Service]
ProtectHome=read-only
"""


def _files() -> dict[str, str]:
    return {
        f"/etc/systemd/system/{GATEWAY_UNIT}": (OPS / GATEWAY_UNIT).read_text(encoding="utf-8"),
        f"/etc/systemd/system/{TERMINAL_UNIT}": (OPS / TERMINAL_UNIT).read_text(encoding="utf-8"),
        f"/etc/systemd/system/{GATEWAY_UNIT}.d/acceptance.conf": _DROPIN_GATEWAY,
        f"/etc/systemd/system/{TERMINAL_UNIT}.d/acceptance.conf": _DROPIN_TERMINAL,
        "/etc/remoteops-gateway/gateway.toml": _GATEWAY_TOML,
        "/etc/ssh/acc_sshd_config": _SSHD_CONFIG,
        f"/etc/systemd/system/{SSHD_UNIT}": _SSHD_SERVICE,
    }


_USERADD = "useradd --system --no-create-home --home-dir /var/lib"
_SETUP = (  # as ops/RUNBOOK.md creates them
    f"{_USERADD}/remoteops-gateway --shell /usr/sbin/nologin remoteops",
    f"{_USERADD}/remoteops-term --shell /bin/bash remoteops-term",
    "chmod o+x /root",
    # the SSH target's login user, and the gateway's identity (runbook §3)
    "useradd --create-home --shell /bin/sh ro-target && usermod -p '*' ro-target",
    "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/acc_host_ed25519",
    "install -d -o remoteops -g remoteops -m 0700 /var/lib/remoteops-gateway /var/lib/remoteops-gateway/.ssh",
    "ssh-keygen -q -t ed25519 -N '' -C remoteops-gateway -f /var/lib/remoteops-gateway/.ssh/id_ed25519",
    "install -d -o ro-target -g ro-target -m 0700 /home/ro-target/.ssh",
    "install -o ro-target -g ro-target -m 0600 /var/lib/remoteops-gateway/.ssh/id_ed25519.pub"
    " /home/ro-target/.ssh/authorized_keys",
    "printf '[127.0.0.1]:2222 %s\\n' \"$(cut -d' ' -f1,2 /etc/ssh/acc_host_ed25519.pub)\""
    " > /var/lib/remoteops-gateway/.ssh/known_hosts",
    "chown -R remoteops:remoteops /var/lib/remoteops-gateway && chmod 0600 /var/lib/remoteops-gateway/.ssh/*",
)


def _probe(target: SystemdTarget, *args: str) -> dict[str, Any]:
    done = target.net_run(
        [sys.executable, "-m", "acceptance._service_probe", *args, URL, str(target.root / TOKEN)], cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"probe {args} exited {done.returncode}: {done.stdout}{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _wait(what: str, ceiling_s: float, probe: Callable[[], bool], interval_s: float = 0.1) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > ceiling_s:
            raise TimeoutError(f"{what}: not within {ceiling_s}s")
        time.sleep(interval_s)  # polling systemd's view of another process (bounded)
    return time.monotonic() - started


def _relaying(target: SystemdTarget) -> bool:
    health = _probe(target, "health")
    return bool(health["upstream_state"] == "connected" and health["relayed_tools"] > 0)


def _start(target: SystemdTarget, figures: dict[str, Any], check: Check) -> dict[str, str]:
    target.systemctl("start", SSHD_UNIT, timeout_s=60)
    started = time.monotonic()
    target.systemctl("start", GATEWAY_UNIT, timeout_s=180)  # returns after READY=1 (Type=notify)
    figures["start_until_ready_s"] = round(time.monotonic() - started, 2)
    gw = target.show(
        GATEWAY_UNIT, "ActiveState", "SubState", "MainPID", "StatusText", "NRestarts", "WatchdogUSec"
    )
    check(gw["ActiveState"] == "active" and gw["SubState"] == "running", f"gateway after start: {gw}")
    check(gw["StatusText"].startswith("serving MCP at"), f"READY=1/STATUS= did not reach systemd: {gw}")
    check(gw["WatchdogUSec"] == f"{WATCHDOG_S}s", f"the drop-in's WatchdogSec is not in force: {gw}")
    term = target.show(TERMINAL_UNIT, "ActiveState", "MainPID")
    check(term["ActiveState"] == "active", f"the terminal unit was not started by Wants=: {term}")
    return gw


def _watchdog_keeps_alive(
    target: SystemdTarget, gw: dict[str, str], figures: dict[str, Any], check: Check
) -> None:
    first = int(target.show(GATEWAY_UNIT, "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"])
    window = 2.2 * WATCHDOG_S
    time.sleep(window)  # an observation window: nothing may happen in it (no event to wait for)
    later = target.show(GATEWAY_UNIT, "WatchdogTimestampMonotonic", "MainPID", "NRestarts", "ActiveState")
    check(int(later["WatchdogTimestampMonotonic"]) > first, f"no WATCHDOG=1 reached systemd in {window}s")
    check(
        later["MainPID"] == gw["MainPID"] and later["NRestarts"] == "0", f"restarted while healthy: {later}"
    )
    figures["alive_window_s"] = round(window, 2)
    figures["last_ping_age_s"] = round(
        (_monotonic_usec(target) - int(later["WatchdogTimestampMonotonic"])) / 1e6, 2
    )


def _exec_in_sandbox(target: SystemdTarget, figures: dict[str, Any], check: Check) -> None:
    """remote_exec from inside the unit's sandbox (syscall filter, no capabilities, private /tmp for the
    ControlMaster sockets) with the service user's own key and known_hosts."""
    out = _probe(target, "exec")
    check(out["stdout"] == ["ro-target\n"] * 3 and out["exit_codes"] == [0] * 3, f"remote_exec: {out}")
    # One master, reused: the calls after the first may run over the agent channel (one session of that
    # same master) instead of a new ssh client each, so one reuse is what every carrier choice shows.
    check(out["masters_created"] == 1 and out["masters_reused"] >= 1, f"ControlMaster in the sandbox: {out}")
    figures["sandboxed_remote_exec"] = {k: out[k] for k in ("masters_created", "masters_reused", "median_ms")}


def _monotonic_usec(target: SystemdTarget) -> int:
    # CLOCK_MONOTONIC is shared with the host (no time namespace): /proc/uptime would not be.
    return time.monotonic_ns() // 1000


def _freeze_and_restart(
    target: SystemdTarget, gw: dict[str, str], figures: dict[str, Any], check: Check
) -> None:
    term_before = target.show(TERMINAL_UNIT, "MainPID", "NRestarts")
    old = gw["MainPID"]
    target.run("kill", "-STOP", old)
    frozen = time.monotonic()
    frozen_usec = _monotonic_usec(target)  # after the kill returned: the freeze was no later than this

    def fired() -> bool:  # systemd leaves "running" the moment the watchdog fires (SIGABRT, then restart)
        now = target.show(GATEWAY_UNIT, "SubState", "MainPID")
        return now["SubState"] != "running" or now["MainPID"] != old

    _wait("watchdog timeout", WATCHDOG_S * 4 + 30, fired, 0.05)
    # When it fired, as systemd recorded it (the unit left "active"), not when a poll through nsenter and
    # systemctl saw it: that poll alone can take a second on a loaded machine.
    exit_stamp = "ActiveExitTimestampMonotonic"
    left_active = int(target.show(GATEWAY_UNIT, exit_stamp)[exit_stamp])
    detected_s = (left_active - frozen_usec) / 1e6

    def active_again() -> bool:
        now = target.show(GATEWAY_UNIT, "ActiveState", "SubState", "MainPID")
        return (
            now["ActiveState"] == "active"
            and now["SubState"] == "running"
            and now["MainPID"] not in ("0", old)
        )

    _wait("gateway active again", 180, active_again, 0.05)
    back_s = time.monotonic() - frozen
    journal = target.journal(GATEWAY_UNIT)
    check("Watchdog timeout" in journal, f"no watchdog timeout in the journal:\n{journal[-3000:]}")
    # The last ping came at most WatchdogSec/2 before the freeze: systemd fires within WatchdogSec of it.
    check(
        detected_s <= WATCHDOG_S + 1.0,
        f"watchdog fired {detected_s:.2f}s after SIGSTOP (WatchdogSec={WATCHDOG_S})",
    )
    term_after = target.show(TERMINAL_UNIT, "MainPID", "NRestarts", "ActiveState")
    check(term_after["MainPID"] == term_before["MainPID"], f"the terminal unit was restarted: {term_after}")
    check(term_after["ActiveState"] == "active" and term_after["NRestarts"] == "0", f"terminal: {term_after}")
    relay_s = _wait("relay after restart", 120, lambda: _relaying(target), 0.3)
    final = target.show(GATEWAY_UNIT, "NRestarts", "MainPID")
    check(final["NRestarts"] == "1", f"restarts: {final}")
    figures.update(
        {
            "watchdog_sec": WATCHDOG_S,
            "sigstop_to_restart_s": round(detected_s, 2),
            "sigstop_to_active_again_s": round(back_s, 2),
            "relay_back_after_restart_s": round(relay_s, 2),
            "restarts": int(final["NRestarts"]),
            "terminal_pid_kept": True,
        }
    )


def _stop_drains(target: SystemdTarget, figures: dict[str, Any], check: Check) -> None:
    marker = target.workdir / "drain-marker"
    probe = subprocess.Popen(
        [*_nsenter_net(target), sys.executable, "-m", "acceptance._service_probe", "drain", URL,
         str(target.root / TOKEN), str(marker)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        _wait("relayed call in flight", 90, lambda: marker.exists() or probe.poll() is not None, 0.02)
        if probe.poll() is not None:
            check(False, f"drain probe exited early: {probe.communicate(timeout=10)}")
        stop_started = time.time()
        target.systemctl("stop", GATEWAY_UNIT, timeout_s=60)
        stop_done = time.time()
        out, err = probe.communicate(timeout=60)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.communicate(timeout=10)
    check(probe.returncode == 0, f"drain probe exited {probe.returncode}: {out}{err[-3000:]}")
    call = json.loads(out.strip().splitlines()[-1])
    check(call.get("is_error") is False, f"the in-flight call did not complete normally: {call}")
    # Its answer came from the stopping gateway itself (a success; the session dies with the process). Not
    # compared with stop_done: the probe's clock reading after the answer races the gateway's exit.
    check(call["finished"] - call["started"] >= WAIT_S - 0.5, f"the in-flight call was cut short: {call}")
    check(call["finished"] > stop_started + 1.0, f"the call was not in flight when the stop began: {call}")
    stopped = target.show(GATEWAY_UNIT, "ActiveState", "Result")
    check(stopped["ActiveState"] == "inactive" and stopped["Result"] == "success", f"after stop: {stopped}")
    # SIGTERM is a "clean" death for systemd too, so Result=success alone would not prove exit 0.
    exit_line = (target.root / EXIT_FILE).read_text(encoding="utf-8").split()
    check(exit_line == ["success", "exited", "0"], f"SERVICE_RESULT EXIT_CODE EXIT_STATUS: {exit_line}")
    figures["stop_with_call_in_flight_s"] = round(stop_done - stop_started, 2)
    figures["call_ran_after_stop_began_s"] = round(call["finished"] - stop_started, 2)
    figures["exit"] = " ".join(exit_line)
    target.systemctl("stop", TERMINAL_UNIT, timeout_s=60)
    term = target.show(TERMINAL_UNIT, "ActiveState", "Result")
    check(term["ActiveState"] == "inactive", f"terminal unit after stop: {term}")


def _nsenter_net(target: SystemdTarget) -> list[str]:
    return ["nsenter", "-t", str(target.pid), "-n", "--"]


def run_service_scenario(figures: dict[str, Any], check: Check) -> dict[str, Any]:
    """Boot, run steps 1-4, shut down; returns what the caller can verify afterwards (cgroup, sysctls)."""
    sysctls = host_sysctls()
    info: dict[str, Any] = {"sysctls_before": sysctls}
    with systemd_target(files=_files(), symlinks=_symlinks(), setup=_SETUP) as target:
        info["cgroup"] = target.cgroup
        figures["boot_s"] = target.boot_s
        gw = _start(target, figures, check)
        _watchdog_keeps_alive(target, gw, figures, check)
        relay_s = _wait("relay", 120, lambda: _relaying(target), 0.3)
        figures["relay_connected_after_alive_window_s"] = round(relay_s, 2)
        _exec_in_sandbox(target, figures, check)
        _freeze_and_restart(target, gw, figures, check)
        _stop_drains(target, figures, check)
    figures["host_sysctls_unchanged"] = host_sysctls() == sysctls
    return info


def checkout_unusable_reason() -> str | None:
    """Why the units cannot run this checkout, or None. The gateway unit has ``PrivateTmp=yes``: a checkout
    (or a venv) under /tmp or /var/tmp is invisible to it through the ``/opt`` links, and its start fails."""
    for path in (ROOT, Path(sys.prefix)):
        resolved = path.resolve()
        if any(resolved.is_relative_to(tmp) for tmp in (Path("/tmp"), Path("/var/tmp"))):
            return f"{resolved} is under a temporary directory, which PrivateTmp=yes hides from the unit"
    return None


def _symlinks() -> dict[str, str]:
    return {"/opt/remoteops-gateway": str(ROOT), "/opt/libtmux-mcp": sys.prefix}
