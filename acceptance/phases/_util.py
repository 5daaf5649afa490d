"""Small helpers the phases share: health snapshots, bounded waits for the relay, latency figures."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from acceptance._env import Env
from acceptance._mcp import error_code, structured

__all__ = ["RELAYED_TOOL", "health", "ms_figures", "timed", "upstream_health", "wait_relay_ok", "wait_until"]

RELAYED_TOOL = "list_sessions"
"""A cheap libtmux-mcp tool (one ``tmux list-sessions``) used wherever a relayed call is needed."""


async def health(env: Env) -> dict[str, Any]:
    return structured(await env.main.call("gateway_health", {}))


async def upstream_health(env: Env) -> dict[str, Any]:
    ups = (await health(env))["upstreams"]
    return dict(next(u for u in ups if u.get("name") == "tmux"))


async def wait_until(
    probe: Callable[[], Awaitable[bool]], ceiling_s: float, *, interval_s: float = 0.1
) -> float:
    """Poll ``probe`` (state of another process, no event to wait on) until true; seconds it took."""
    started = time.monotonic()
    with anyio.fail_after(ceiling_s):
        while not await probe():  # noqa: ASYNC110 - another process's state; there is no event to await
            await anyio.sleep(interval_s)
    return time.monotonic() - started


async def wait_relay_ok(env: Env, ceiling_s: float = 30.0) -> float:
    """Until a relayed call succeeds (after an upstream (re)start); seconds it took."""

    async def ok() -> bool:
        return error_code(await env.main.call(RELAYED_TOOL, {})) is None

    return await wait_until(ok, ceiling_s)


async def timed(call: Awaitable[dict[str, Any]]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    result = await call
    return result, (time.perf_counter() - started) * 1000


def ms_figures(prefix: str, samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return {
        f"{prefix}_median_ms": round(statistics.median(ordered), 2),
        f"{prefix}_p95_ms": round(p95, 2),
        f"{prefix}_max_ms": round(ordered[-1], 2),
    }
