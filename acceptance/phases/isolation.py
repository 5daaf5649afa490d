"""Isolation: only allow-listed targets are reachable; toolsets, include/exclude and relayed-name filters
decide what is listed and callable (filtered tools are neither)."""

from __future__ import annotations

import shutil
from typing import Any

from mcp import MCPError

from acceptance._mcp import error_of, structured
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import RELAYED_TOOL, health, wait_until
from gateway.tools import all_specs

__all__ = ["isolation"]

UNKNOWN_TOOL = -32602


async def _refused(call: Any, name: str, args: dict[str, Any]) -> int | None:
    """The JSON-RPC error code of a call that must be refused before dispatch, None when it was served."""
    try:
        await call(name, args)
    except MCPError as exc:
        return exc.error.code
    return None


@phase("isolation", "allow-listed targets only; toolsets, include/exclude and relay filters", needs=("sshd",))
async def isolation(ctx: PhaseContext) -> None:
    env = ctx.env
    runs = (await health(env))["transport"]["runs"]
    # sshd-root is a working alias in the ssh_config, but not an allow-listed target.
    for target in ("sshd-root", "root@127.0.0.1", "plain; id"):
        err = error_of(await env.main.call("remote_exec", {"target": target, "argv": ["id"]}))
        ctx.check(err is not None and err.get("code") == "policy_denied", f"target {target!r}: {err}")
    ctx.check((await health(env))["transport"]["runs"] == runs, "a denied call reached the transport")
    main_tools = set(await env.main.tool_names())

    control = env.control_dir()
    ctx.stack.callback(shutil.rmtree, control, True)
    ctx.created(f"{control} removed", lambda: not control.exists())
    config: dict[str, Any] = {
        **env.targets_config(control),
        "tools": {"toolsets": ["inspect", "upstream"], "exclude": ["target_diagnose"]},
    }
    if env.terminal is not None:
        config.update(env.upstream_config())
        config["upstreams"][0]["include"] = [RELAYED_TOOL]
    gw = await ctx.stack.enter_async_context(env.extra_gateway("isolation", config))
    ctx.created(f"restricted gateway {gw.proc.pid} stopped", lambda: gw.proc.poll() is not None)
    client = await ctx.stack.enter_async_context(env.client_of(gw))
    if env.terminal is not None:

        async def relayed() -> bool:
            return RELAYED_TOOL in await client.tool_names()

        await wait_until(relayed, 30)
    listed = set(await client.tool_names())
    ctx.check("remote_exec" not in listed, "execute toolset off, yet remote_exec is listed")
    ctx.check("target_diagnose" not in listed, "excluded target_diagnose is listed")
    ctx.check({"gateway_health", "target_list"} <= listed, f"inspect tools missing: {sorted(listed)}")
    # an own tool the configuration leaves out is refused before dispatch, saying which key enables it
    for name, args, key in (
        ("remote_exec", {"target": "plain", "argv": ["id"]}, "tools.toolsets"),
        ("target_diagnose", {"target": "plain"}, "tools.exclude"),
    ):
        err = error_of(await client.call(name, args))
        ctx.check(
            err is not None
            and err.get("code") == "policy_denied"
            and err.get("details", {}).get("config_key") == key,
            f"filtered {name} answered {err}, want policy_denied naming {key}",
        )
    restricted = structured(await client.call("gateway_health", {}))
    ctx.check(restricted["transport"]["runs"] == 0, "a filtered tool reached the transport")
    ctx.check("target_diagnose" in restricted["filtered_out"], f"filtered_out: {restricted['filtered_out']}")
    relayed_main = relayed_restricted = 0
    if env.terminal is not None:
        upstream_names = main_tools - {spec.name for spec in all_specs()}
        relayed_main = len(upstream_names)
        relayed_restricted = len(listed & upstream_names)
        ctx.check(
            listed & upstream_names == {RELAYED_TOOL}, f"relay include: {sorted(listed & upstream_names)}"
        )
        other = sorted(upstream_names - {RELAYED_TOOL})[0]
        code = await _refused(client.call, other, {})
        ctx.check(code == UNKNOWN_TOOL, f"relayed {other} outside include answered {code}")
    ctx.figures.update(
        {
            "denied_targets": 3,
            "tools_main": len(main_tools),
            "tools_restricted": len(listed),
            "relayed_main": relayed_main,
            "relayed_restricted": relayed_restricted,
            "filtered_out_restricted": restricted["filtered_out"],
        }
    )
