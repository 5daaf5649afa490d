"""Start-up with a stdio upstream: the gateway spawns libtmux-mcp before its own imports, so the two
start-ups overlap, and the first ``tools/list`` of a stdio client already holds the relayed tools
(``acceptance/bench_startup.py`` measures it; here it is checked once, with the figures beside it)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import anyio

from acceptance import bench_startup
from acceptance._registry import PhaseContext, phase

__all__ = ["startup_overlap"]


@phase(
    "startup_overlap", "a stdio upstream spawned before the gateway's imports; its tools in the first list"
)
async def startup_overlap(ctx: PhaseContext) -> None:
    found = bench_startup._peer()  # libtmux-mcp beside this interpreter
    if found is None:
        ctx.skip("libtmux-mcp is not installed beside this interpreter")
    argv, env = found
    work = Path(tempfile.mkdtemp(prefix="rogst-"))
    ctx.created(f"the phase's directory {work} is removed", lambda: not work.exists())
    try:
        own = {k: env[k] for k in ("FASTMCP_SHOW_SERVER_BANNER", "LIBTMUX_SOCKET")}
        both, _late = bench_startup._upstream_configs(work, argv, own)
        together = await anyio.to_thread.run_sync(
            lambda: bench_startup.spawn_to_tools(both, expect=bench_startup.RELAYED_TOOL)
        )
        alone = await anyio.to_thread.run_sync(
            lambda: bench_startup.spawn_to_tools(argv, env, expect=bench_startup.RELAYED_TOOL)
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ctx.check(together.wall_ms > 0, "no first tools/list answer")
    ctx.figures.update(
        {
            "first_list_with_upstream_ms": round(together.wall_ms),
            "upstream_alone_ms": round(alone.wall_ms),
        }
    )
