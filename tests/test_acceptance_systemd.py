"""The gateway under a real systemd, from the unit files in ops/ (adapted by drop-ins only): READY=1 reaches
systemd, the watchdog pings keep it up, a gateway frozen with SIGSTOP is restarted within WatchdogSec while
the terminal MCP unit keeps running, ``remote_exec`` works from inside the unit's sandbox, and
``systemctl stop`` drains an in-flight call and exits 0. The target
leaves nothing behind (its cgroup, mounts, the host's sysctls). Skipped, with the reason, only where the
machine cannot boot a systemd target (not root, no writable cgroup v2, no systemd) or the checkout lies under
/tmp (the unit's PrivateTmp=yes hides it)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from acceptance._systemd_service import WATCHDOG_S, checkout_unusable_reason, run_service_scenario
from tests.fixtures.systemd_target import host_sysctls, systemd_target_unavailable_reason

pytestmark = pytest.mark.slow


def _check(condition: bool, what: str) -> None:
    assert condition, what


def test_a_frozen_gateway_is_restarted_by_the_systemd_watchdog_while_the_upstream_unit_keeps_running() -> (
    None
):
    reason = systemd_target_unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot boot a systemd target here: {reason}")
    if (unusable := checkout_unusable_reason()) is not None:
        pytest.skip(f"the ops/ units cannot run this checkout: {unusable}")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (the terminal MCP unit needs it; ops/test.sh installs it)")
    before = host_sysctls()
    figures: dict[str, Any] = {}
    info = run_service_scenario(figures, _check)
    assert figures["sigstop_to_restart_s"] <= WATCHDOG_S + 1.0
    assert figures["restarts"] == 1
    assert figures["terminal_pid_kept"] is True
    assert figures["call_ran_after_stop_began_s"] > 1.0
    assert figures["exit"] == "success exited 0"
    assert figures["sandboxed_remote_exec"]["masters_created"] == 1  # ssh works inside the unit's sandbox
    assert not info["cgroup"].exists()
    assert host_sysctls() == before
