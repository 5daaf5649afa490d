"""Burn-in: N iterations of own, remote and relayed calls (and fresh MCP sessions) with no growth of the
gateway's child processes, file descriptors, memory or live masters."""

from __future__ import annotations

import time
from typing import Any

import anyio

from acceptance._env import proc_figures
from acceptance._mcp import structured
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import RELAYED_TOOL, health, wait_relay_ok

__all__ = ["burn_in"]

WARMUP = 10
FD_SLACK = 2
"""Pooled keep-alive connections may differ by one or two between two quiet moments."""
RSS_SLACK_KB = 8 * 1024
SETTLE_S = 10.0
"""How long the final snapshot may be retaken: a child or pipe of the last call may still be on its way
out (an exiting ``ssh``, a descriptor closed a moment later); what is still there after this has leaked."""


async def _iteration(ctx: PhaseContext, i: int) -> int:
    env = ctx.env
    calls = 0
    structured(await env.main.call("gateway_health", {}))
    calls += 1
    if env.sshd is not None:
        out = structured(await env.main.call("remote_exec", {"target": "plain", "argv": ["echo", str(i)]}))
        ctx.check(out["stdout"] == f"{i}\n", f"iteration {i}: {out}")
        calls += 1
    if env.terminal is not None:
        structured(await env.main.call(RELAYED_TOOL, {}))
        calls += 1
    if i % 10 == 0:  # a short-lived MCP session of its own, opened and closed
        async with env.client_of(env.gw) as other:
            structured(await other.call("target_list", {}))
        calls += 1
    return calls


async def _snapshot(ctx: PhaseContext) -> dict[str, Any]:
    figures: dict[str, Any] = proc_figures(ctx.env.gw.pid)
    figures["live_masters"] = (await health(ctx.env))["transport"]["live_masters"]
    return figures


def _within(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return bool(
        after["children"] <= before["children"]
        and after["live_masters"] <= before["live_masters"]
        and after["fds"] <= before["fds"] + FD_SLACK
    )


async def _settled(ctx: PhaseContext, before: dict[str, Any]) -> dict[str, Any]:
    """The final snapshot, retaken (bounded by SETTLE_S) until the counts are back within bounds."""
    deadline = time.monotonic() + SETTLE_S
    after = await _snapshot(ctx)
    while not _within(before, after) and time.monotonic() < deadline:
        await anyio.sleep(0.2)  # polling another process's /proc counts: there is no event to await
        after = await _snapshot(ctx)
    return after


@phase("burn_in", "N iterations with no growth of processes, fds, memory or masters")
async def burn_in(ctx: PhaseContext) -> None:
    if ctx.env.terminal is not None:
        await wait_relay_ok(ctx.env)
    for i in range(WARMUP):
        await _iteration(ctx, i)
    before = await _snapshot(ctx)
    n = ctx.n(30, 1000)
    calls = 0
    samples = [before]
    for i in range(n):
        calls += await _iteration(ctx, i)
        if (i + 1) % max(1, n // 5) == 0:
            samples.append(await _snapshot(ctx))
    after = await _settled(ctx, before)
    ctx.check(after["children"] <= before["children"], f"child processes grew: {before} -> {after}")
    ctx.check(after["live_masters"] <= before["live_masters"], f"masters grew: {before} -> {after}")
    ctx.check(after["fds"] <= before["fds"] + FD_SLACK, f"file descriptors grew: {before} -> {after}")
    grown = after["rss_kb"] - before["rss_kb"]
    ctx.check(grown <= RSS_SLACK_KB, f"RSS grew by {grown} KiB (allowed {RSS_SLACK_KB})")
    ctx.figures.update(
        {
            "iterations": n,
            "calls": calls,
            "before": before,
            "after": after,
            "rss_growth_kb": grown,
            "fd_growth": after["fds"] - before["fds"],
            "samples": samples,
            "allowed": {"fds": FD_SLACK, "rss_kb": RSS_SLACK_KB, "children": 0, "masters": 0},
        }
    )
