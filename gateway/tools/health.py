"""``gateway_health`` (inspect): what the gateway is, what it serves and how its parts are doing."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway._catalog import Toolset, ToolSpec
from gateway._context import ToolContext
from gateway.tools._base import Input, Output

__all__ = ["SPECS"]


class HealthIn(Input):
    pass


class AuditHealth(Output):
    path: str
    records_written: int
    records_failed: int = Field(description="Records the file refused (write errors); never silent.")
    records_dropped: int = Field(description="Records dropped because the write queue was full.")
    records_pending: int = Field(description="Records queued, not yet on disk.")
    healthy: bool = Field(description="False while writes fail or records are dropped.")
    last_error: str | None


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
    sessions: dict[str, Any] = Field(
        description="Interactive sessions: counts by state (alive, exited), remote directory, size, history."
    )
    state: dict[str, Any] = Field(description="The state store: its directory and records moved aside.")
    forwards: dict[str, Any] = Field(
        description="Managed SSH forwards: active, lost, adopted after a restart, counters."
    )


async def gateway_health(ctx: ToolContext, _: HealthIn) -> HealthOut:
    rt = ctx.runtime
    return HealthOut(
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
        transport=rt.remote.stats().model_dump(mode="json"),
        upstreams=rt.redactor.any(rt.relay.health()),  # last errors may quote credentials
        tasks=rt.tasks.health().model_dump(mode="json"),
        sessions=rt.sessions.health().model_dump(mode="json"),
        state=rt.state.status(),
        forwards=rt.forwards.stats(),
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


SPECS: list[ToolSpec[Any, Any]] = [
    ToolSpec(
        name="gateway_health",
        title="Gateway health",
        description="Version, uptime, enabled toolsets, tool counts (own, relayed, filtered out), audit-log "
        "status, SSH transport counters, upstream state, task and session counts, state-store problems and "
        "managed forwards.",
        input_model=HealthIn,
        output_model=HealthOut,
        toolset=Toolset.INSPECT,
        read_only=True,
        destructive=False,
        idempotent=True,
        open_world=False,
        handler=gateway_health,
        render=_render,
    )
]
