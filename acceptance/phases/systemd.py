"""The gateway as a service under a real systemd, from the unit files in ``ops/`` (see
``acceptance/_systemd_service.py``): READY=1, watchdog keep-alive, a SIGSTOP-frozen gateway restarted by the
watchdog while the terminal unit keeps running, ``systemctl stop`` draining a call and exiting 0. The target
(``tests/fixtures/systemd_target.py``) must leave nothing behind: its cgroup is gone, the host's mounts and
``fs.protected_*`` sysctls are unchanged."""

from __future__ import annotations

from pathlib import Path

import anyio

from acceptance._registry import PhaseContext, phase
from acceptance._systemd_service import checkout_unusable_reason, run_service_scenario
from acceptance.harness.systemd_target import host_sysctls, systemd_target_unavailable_reason

__all__ = ["service_under_systemd"]


@phase("systemd", "the gateway under a real systemd from ops/ units: READY, watchdog restart, drain")
async def service_under_systemd(ctx: PhaseContext) -> None:
    reason = systemd_target_unavailable_reason()
    if reason is not None:
        ctx.skip(f"cannot boot a systemd target here: {reason}")
    if (unusable := checkout_unusable_reason()) is not None:
        ctx.skip(f"the ops/ units cannot run this checkout: {unusable}")
    before = host_sysctls()
    ctx.created("host fs.protected_* sysctls unchanged", lambda: host_sysctls() == before)
    info = await anyio.to_thread.run_sync(run_service_scenario, ctx.figures, ctx.check)
    cgroup = Path(info["cgroup"])
    ctx.created(f"target cgroup {cgroup} removed", lambda: not cgroup.exists())
