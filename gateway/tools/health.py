"""``gateway_health`` (inspect): what the gateway is, what it serves and how its parts are doing."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway._context import ToolContext
from gateway.tools._base import Input, Output
from gateway.tools._registry import READ, ToolGroup

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs


class HealthIn(Input):
    pass


class AuditShipHealth(Output):
    url: str = Field(description="The collector (scheme, host and path; never a query string).")
    healthy: bool = Field(description="False while POSTs fail or the spool's disk refuses records.")
    last_error: str | None
    stream: str = Field(description="This spool's stream id: with seq, each record's idempotency key.")
    next_seq: int = Field(description="The sequence number the next record gets.")
    pending_records: int = Field(description="Spooled, not yet acknowledged by the collector.")
    spool_bytes: int
    spool_max_bytes: int
    when_full: str = Field(description="drop_oldest or refuse_new: what a full spool gives up.")
    spooled: int = Field(description="Records put in the spool since start.")
    delivered: int = Field(description="Records the collector acknowledged (2xx) since start.")
    dropped_oldest: int = Field(description="Undelivered records dropped to make room (drop_oldest).")
    refused: int = Field(description="New records not spooled because the spool was full (refuse_new).")
    rejected: int = Field(description="Single records the collector refused (400/413/422), skipped.")
    lost: int = Field(description="Records cut from the spool at start-up (torn by a crash, missing).")
    spool_failed: int = Field(description="Records the spool's disk refused.")
    posts: int
    post_failures: int
    last_delivered_at: str | None


class AuditHealth(Output):
    path: str
    records_written: int
    records_failed: int = Field(description="Records the file refused (write errors); never silent.")
    records_dropped: int = Field(description="Records dropped because the write queue was full.")
    records_pending: int = Field(description="Records queued, not yet on disk.")
    healthy: bool = Field(description="False while writes fail or records are dropped.")
    last_error: str | None
    ship: AuditShipHealth | None = Field(description="Audit shipping ([audit.ship]); null when off.")


class HealthOut(Output):
    version: str
    pid: int
    started_at: str
    uptime_s: float
    toolsets: list[str]
    own_tools: int
    relayed_tools: int
    filtered_out: list[str] = Field(
        description="Own tools disabled by the operator's toolset/include/exclude choice."
    )
    unavailable: dict[str, str] = Field(
        description="Filtered-out tools the configuration cannot serve, with the reason.",
    )
    audit: AuditHealth
    transport: dict[str, Any] = Field(
        description="ControlMaster pool counters and multiplex state; per target its carrier (agent | ssh)."
    )
    upstreams: list[dict[str, Any]] = Field(
        description="Per upstream: state, identity, counters, dropped/renamed tools; relayed resource, "
        "template and prompt counts, capabilities, surface_dropped/surface_renamed."
    )
    tasks: dict[str, Any] = Field(description="Remote tasks: counts by state, remote directory, retention.")
    mcp_tasks: dict[str, Any] = Field(
        description="MCP tasks (long calls answered with a task handle): counts by status and protocol "
        "generation, durable ones, created/polled/cancelled/completed since start."
    )
    sessions: dict[str, Any] = Field(
        description="Interactive sessions: counts by state (alive, exited), remote directory, size, history."
    )
    state: dict[str, Any] = Field(description="The state store: its directory and records moved aside.")
    forwards: dict[str, Any] = Field(
        description="Managed SSH forwards: active, lost, adopted after a restart, counters."
    )


def _render(out: HealthOut) -> str:
    ups = ", ".join(f"{u.get('name')}={u.get('state')}" for u in out.upstreams) or "none"
    carriers = out.transport.get("carriers") or {}
    used = ", ".join(f"{name}={c.get('carrier') or '-'}" for name, c in carriers.items()) or "none"
    return (
        f"remoteops-gateway {out.version} up {out.uptime_s:.0f}s; toolsets {','.join(out.toolsets)}; "
        f"{out.own_tools} own + {out.relayed_tools} relayed tools ({len(out.filtered_out)} filtered out); "
        f"upstreams: {ups}; carriers: {used}; audit {'ok' if out.audit.healthy else 'FAILING'}"
    )


@_tools.tool(
    "gateway_health",
    "Gateway health",
    "Version, uptime, enabled toolsets, tool counts (own, relayed, filtered out), audit-log status, SSH "
    "transport counters, upstream state, task, MCP task and session counts, state-store problems and managed "
    "forwards.",
    render=_render,
    open_world=False,
)
async def gateway_health(ctx: ToolContext, _: HealthIn) -> HealthOut:
    rt = ctx.runtime
    transport = rt.remote.stats().model_dump(mode="json")
    # A restricted caller learns nothing per target it may not use, nor about upstreams it cannot reach.
    carriers = transport.get("carriers") or {}
    transport["carriers"] = {name: carriers[name] for name in ctx.visible_targets(list(carriers))}
    upstreams = rt.relay.health() if ctx.policy.allows_toolset(ctx.identity, "upstream") else []
    out = HealthOut(
        version=rt.identity.version,
        pid=rt.identity.pid,
        started_at=rt.identity.started_at,
        uptime_s=round(rt.uptime_s(), 3),
        toolsets=sorted(t.value for t in rt.catalog.toolsets),
        own_tools=len(rt.catalog.enabled),
        relayed_tools=rt.relay.tool_count(),
        filtered_out=list(rt.catalog.filtered_out),
        unavailable=dict(rt.catalog.unavailable),
        audit=AuditHealth.model_validate(rt.audit.status()),
        transport=transport,
        upstreams=upstreams,
        tasks=rt.tasks.health().model_dump(mode="json"),
        mcp_tasks=rt.mcp_tasks.health(),
        sessions=rt.sessions.health().model_dump(mode="json"),
        state=rt.state.status(),
        forwards=rt.forwards.stats(),
    )
    # The whole answer leaves through the one Redactor: last errors (upstream, audit, transport, forwards)
    # and state-store problems quote what failed, and that may hold credentials.
    return HealthOut.model_validate(rt.redactor.any(out.model_dump(mode="json")))
