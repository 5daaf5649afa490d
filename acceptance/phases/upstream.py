"""The relayed upstream (libtmux-mcp over HTTP, killed with -9 and started again): the gateway's own tools
keep answering, callers get ``upstream_unavailable`` in bounded time, relaying resumes by itself; 50
callers during an outage share one reconnect attempt at a time and one successful reconnect."""

from __future__ import annotations

import time
from typing import Any

import anyio

from acceptance._mcp import error_of, structured
from acceptance._registry import PhaseContext, phase, pid_gone
from acceptance.phases._util import (
    RELAYED_TOOL,
    health,
    ms_figures,
    timed,
    upstream_health,
    wait_relay_ok,
    wait_until,
)

__all__ = ["reconnect_storm", "upstream_restart"]

WAITERS = 50


async def _kill_terminal(ctx: PhaseContext) -> None:
    terminal = ctx.env.terminal
    assert terminal is not None
    pid = terminal.pid
    assert pid is not None
    await terminal.kill()
    ctx.created(f"killed libtmux-mcp {pid} reaped", lambda: pid_gone(pid))


async def _restart_terminal(ctx: PhaseContext) -> float:
    """Start the upstream again on its port; seconds until a relayed call works again."""
    terminal = ctx.env.terminal
    assert terminal is not None
    await terminal.start()
    return await wait_relay_ok(ctx.env, ceiling_s=30)


async def _not_connected(ctx: PhaseContext) -> bool:
    return bool((await upstream_health(ctx.env))["state"] != "connected")


@phase(
    "upstream_restart",
    "upstream killed (-9) and restarted: own tools answer, relay resumes",
    needs=("upstream",),
)
async def upstream_restart(ctx: PhaseContext) -> None:
    env = ctx.env
    await wait_relay_ok(env)
    before = await upstream_health(env)
    await _kill_terminal(ctx)
    killed_at = time.monotonic()
    own_ms: list[float] = []
    # The first relayed call after the kill finds the connection dead; no call was in flight.
    started = time.monotonic()
    first = error_of(await env.main.call(RELAYED_TOOL, {}))
    first_ms = (time.monotonic() - started) * 1000
    ctx.check(first is not None, "a relayed call succeeded with the upstream killed")
    assert first is not None
    ctx.check(first.get("code") == "upstream_unavailable", f"relayed call during the outage: {first}")
    ctx.check(first.get("retryable") is True, f"upstream_unavailable must be retryable: {first}")
    noticed_s = await wait_until(lambda: _not_connected(ctx), 30)
    for _ in range(ctx.n(5, 50)):  # the gateway's own tools answer at their usual speed meanwhile
        result, ms = await timed(env.main.call("gateway_health", {}))
        structured(result)
        own_ms.append(ms)
        if env.sshd is not None:
            result, ms = await timed(env.main.call("remote_exec", {"target": "plain", "argv": ["true"]}))
            structured(result)
            own_ms.append(ms)
    err = error_of(await env.main.call(RELAYED_TOOL, {}))
    ctx.check(err is not None and err.get("code") == "upstream_unavailable", f"later in the outage: {err}")
    outage_s = time.monotonic() - killed_at
    recovery_s = await _restart_terminal(ctx)
    after = await upstream_health(env)
    ctx.check(after["state"] == "connected", f"upstream state after restart: {after['state']}")
    successes = after["connect_successes"] - before["connect_successes"]
    ctx.check(successes == 1, f"{successes} successful reconnects for one restart")
    ctx.check(after["ambiguous_losses"] == before["ambiguous_losses"], "an idle kill was counted ambiguous")
    ctx.figures.update(
        {
            "own_calls_during_outage": len(own_ms),
            **ms_figures("own_call_during_outage", own_ms),
            "first_relayed_error_ms": round(first_ms, 1),
            "outage_noticed_s": round(noticed_s, 2),
            "outage_s": round(outage_s, 2),
            "relay_back_after_restart_s": round(recovery_s, 2),
            "reconnects": successes,
            "connect_attempts_during_outage": after["connect_attempts"] - before["connect_attempts"],
        }
    )


@phase(
    "reconnect_storm",
    "50 callers during an upstream outage: one reconnect in flight, one reconnect",
    needs=("upstream",),
)
async def reconnect_storm(ctx: PhaseContext) -> None:
    env = ctx.env
    await wait_relay_ok(env)
    before = await upstream_health(env)
    await _kill_terminal(ctx)
    # One call finds the connection dead (the gateway would otherwise notice at its next keepalive ping).
    first = error_of(await env.main.call(RELAYED_TOOL, {}))
    ctx.check(first is not None and first.get("code") == "upstream_unavailable", f"first call: {first}")
    await wait_until(lambda: _not_connected(ctx), 30)
    mid = await upstream_health(env)
    outcomes: list[tuple[str | None, bool | None, float]] = []

    async def waiter() -> None:
        started = time.monotonic()
        result: dict[str, Any] = await env.main.call(RELAYED_TOOL, {})
        err = error_of(result)
        elapsed = time.monotonic() - started
        outcomes.append(
            (None, None, elapsed) if err is None else (err.get("code"), err.get("retryable"), elapsed)
        )

    storm_started = time.monotonic()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(WAITERS):
                tg.start_soon(waiter)
    storm_s = time.monotonic() - storm_started
    during = await upstream_health(env)
    codes = {str(code) for code, _, _ in outcomes}
    ctx.check(len(outcomes) == WAITERS, f"{len(outcomes)} of {WAITERS} waiters returned")
    ctx.check(codes == {"upstream_unavailable"}, f"waiter outcomes: {sorted(codes)}")
    ctx.check(all(retryable is True for _, retryable, _ in outcomes), "upstream_unavailable not retryable")
    max_wait = max(elapsed for _, _, elapsed in outcomes)
    ctx.check(max_wait <= 1 + 3, f"a waiter waited {max_wait:.1f} s (call_wait_s is 1)")
    ctx.check(
        during["attempts_in_flight_max"] == 1,
        f"attempts in flight at once: {during['attempts_in_flight_max']}",
    )
    attempts = during["connect_attempts"] - mid["connect_attempts"]
    ctx.check(attempts < WAITERS // 5, f"{attempts} connect attempts for {WAITERS} waiters")
    recovery_s = await _restart_terminal(ctx)
    after = await upstream_health(env)
    reconnects = after["connect_successes"] - before["connect_successes"]
    ctx.check(reconnects == 1, f"{reconnects} successful reconnects after the storm")
    health_after = await health(env)
    ctx.check(health_after["relayed_tools"] > 0, "relayed tools gone after the storm")
    ctx.figures.update(
        {
            "waiters": WAITERS,
            "unavailable": sum(code == "upstream_unavailable" for code, _, _ in outcomes),
            "storm_wall_s": round(storm_s, 2),
            "max_wait_s": round(max_wait, 2),
            "connect_attempts_during_storm": attempts,
            "attempts_in_flight_max": during["attempts_in_flight_max"],
            "reconnects": reconnects,
            "relay_back_after_restart_s": round(recovery_s, 2),
        }
    )
