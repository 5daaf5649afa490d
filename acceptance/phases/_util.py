"""Small helpers the phases share: health snapshots, bounded waits for the relay, latency figures."""

from __future__ import annotations

import math
import select
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio

from acceptance._env import Env
from acceptance._mcp import error_code, structured
from acceptance._registry import PhaseContext

__all__ = [
    "RELAYED_TOOL",
    "health",
    "ms_figures",
    "own_gateway_config",
    "pidfd_exited",
    "running",
    "shared_dir",
    "timed",
    "upstream_health",
    "wait_relay_ok",
    "wait_stopped",
    "wait_until",
]

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


def own_gateway_config(env: Env, targets: Iterable[dict[str, Any]], **sections: Any) -> dict[str, Any]:
    """The configuration of a phase's own gateway: the run's sshd, a fresh short control directory, the
    given targets (``{"name": ..., "host": <sshd alias>, ...}``) and extra sections."""
    assert env.sshd is not None
    transport = {
        "ssh_config_file": str(env.sshd.ssh_config),
        "control_dir": str(env.control_dir()),
        "connect_timeout_s": 5,
        **sections.pop("transport", {}),
    }
    return {"transport": transport, "targets": list(targets), **sections}


def shared_dir(ctx: PhaseContext, prefix: str) -> Path:
    """A directory the target's plain user may write (the target is this machine), removed with the
    phase's stack and checked gone; its path is a run marker (no process may mention it at the end)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o777)  # a throwaway directory of this phase; another uid (the target user) writes in it
    ctx.env.markers.append(str(path))
    ctx.stack.callback(shutil.rmtree, path, True)
    ctx.created(f"{path} removed", lambda: not path.exists())
    return path


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie re-parented to a PID 1 that does not reap runs nothing)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def wait_stopped(pids: Iterable[int], ceiling_s: float) -> bool:
    """Until none of ``pids`` runs (bounded); True when they all stopped in time."""
    wanted = list(pids)

    async def stopped() -> bool:
        return not any(running(pid) for pid in wanted)

    with anyio.move_on_after(ceiling_s):
        await wait_until(stopped, ceiling_s + 1, interval_s=0.05)
        return True
    return False


def pidfd_exited(fd: int) -> bool:
    """A pidfd turns readable once its process exited (zombie or reaped): never a recycled pid."""
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)
