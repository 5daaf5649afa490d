"""Multiplex reuse (one master serves many calls) and stale-master recovery (a master killed with -9)."""

from __future__ import annotations

import os
import signal
from typing import Any

from acceptance._env import Env
from acceptance._mcp import structured
from acceptance._registry import PhaseContext, phase, pid_gone
from acceptance.harness.procs import wait_gone
from acceptance.phases._util import health, ms_figures, timed

__all__ = ["multiplex"]


async def _plain_mux(env: Env) -> dict[str, Any]:
    listed = structured(await env.main.call("target_list", {}))
    return dict(next(t for t in listed["targets"] if t["name"] == "plain")["multiplex"])


@phase("multiplex", "ControlMaster reuse and stale-master recovery", needs=("sshd",))
async def multiplex(ctx: PhaseContext) -> None:
    env = ctx.env
    call = env.main.call
    structured(await call("remote_exec", {"target": "plain", "argv": ["true"]}))  # a master exists now
    before = (await health(env))["transport"]
    n = ctx.n(20, 200)
    samples = []
    for _ in range(n):
        result, ms = await timed(call("remote_exec", {"target": "plain", "argv": ["true"]}))
        structured(result)
        samples.append(ms)
    after = (await health(env))["transport"]
    created = after["masters_created"] - before["masters_created"]
    reused = after["masters_reused"] - before["masters_reused"]
    ctx.check(created == 0, f"{created} masters created for {n} calls over a live master")
    carrier = (after.get("carriers") or {}).get("plain") or {}
    if carrier.get("carrier") == "agent":  # the calls ride one persistent agent session over the master
        opened = carrier.get("channels_started", 0) - ((before.get("carriers") or {}).get("plain") or {}).get(
            "channels_started", 0
        )
        ctx.check(opened == 0, f"{opened} new agent channels for {n} calls over a live one")
        ctx.figures["carrier"] = "agent"
    else:
        ctx.check(reused >= n, f"only {reused} of {n} calls reused the master")
        ctx.figures["carrier"] = "ssh"

    mux = await _plain_mux(env)
    old_pid = mux["master_pid"]
    ctx.check(mux["master_alive"] is True and isinstance(old_pid, int), f"no live master: {mux}")
    # A stale master is a dead one: the call below waits until the kill took effect (its pidfd turns readable;
    # SIGKILL ends the process only once it is scheduled). A master dying while a request is being written
    # is another case, rightly answered transport_lost (it may have run).
    os.kill(old_pid, signal.SIGKILL)
    await wait_gone(old_pid, 30)
    ctx.created(f"killed master {old_pid} reaped by the gateway", lambda: pid_gone(old_pid))
    result, recovery_ms = await timed(call("remote_exec", {"target": "plain", "argv": ["echo", "again"]}))
    ctx.check(structured(result)["stdout"] == "again\n", f"call after the master was killed: {result}")
    recovered = (await health(env))["transport"]
    new_mux = await _plain_mux(env)
    ctx.check(new_mux["master_alive"] is True, f"no new master: {new_mux}")
    ctx.check(new_mux["master_pid"] != old_pid, "the killed master is still listed")
    fresh = recovered["masters_created"] - after["masters_created"]
    stale = recovered["stale_recovered"] - after["stale_recovered"]
    ctx.check(fresh + stale >= 1, f"no recovery counted: {recovered}")
    ctx.figures.update(
        {
            "calls": n,
            "masters_created": created,
            "masters_reused": reused,
            "reuse_ratio": round(reused / n, 3),  # ssh carrier: one master use per call; agent: one in all
            "stale_recovery_call_ms": round(recovery_ms, 1),
            "new_masters_after_kill": fresh,
            "stale_recovered": stale,
            "live_masters": recovered["live_masters"],
            **ms_figures("reused", samples),
        }
    )
