"""Frozen configuration of one upstream MCP server (the gateway's config loader builds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["UpstreamSettings"]


class UpstreamSettings(BaseModel):
    """How to reach one upstream MCP server and how patiently to supervise it.

    `include`/`exclude` tool filters are the gateway's concern and deliberately absent here.
    The bearer token is read from `bearer_token_file` on every (re)connect, so it can rotate;
    it is never stored on this object nor logged.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    transport: Literal["http", "stdio"]

    # transport="http"
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token_file: Path | None = None

    # transport="stdio"
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None

    mode: Literal["legacy", "auto"] = "legacy"
    """Protocol negotiation: "legacy" pins the initialize handshake era (no server/discover probe)."""

    connect_timeout_s: float = Field(default=15.0, gt=0)
    """Bound on one connection attempt: spawn/TCP connect, handshake and the first tools/list."""
    call_wait_s: float = Field(default=10.0, ge=0)
    """How long a caller waits for a working connection during an outage before UpstreamUnavailable."""
    call_timeout_s: float = Field(default=600.0, gt=0)
    """Ceiling on one relayed tools/call; past it the call is cancelled and reported as ambiguous."""
    elicitation_timeout_s: float = Field(default=300.0, gt=0)
    """How long an upstream's elicitation waits for the calling client's answer (never beyond the
    call's own ceiling) before the upstream is told that no answer came."""
    list_timeout_s: float = Field(default=30.0, gt=0)
    """Bound on a tools/list refresh after notifications/tools/list_changed."""
    keepalive_interval_s: float = Field(default=10.0, ge=0)
    """Probe the upstream's liveness this often (a ping; `server/discover` on 2026-07-28+ connections),
    idle or with calls in flight (0 = never). Each probe is bounded by `liveness_timeout_s`."""
    liveness_timeout_s: float = Field(default=30.0, gt=0)
    """An upstream that answers no probe for this long is declared lost: calls in flight end as
    ambiguous at that moment and the supervisor reconnects. Must exceed `keepalive_interval_s`."""
    first_list_wait_s: float = Field(default=5.0, ge=0)
    """While the first connection since start is being made, how long (from start) the gateway's
    tools/list waits for it, so the first list already holds this upstream's tools. An upstream known
    to be down never delays listing."""

    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    backoff_multiplier: float = Field(default=2.0, ge=1)
    backoff_jitter: float = Field(default=0.2, ge=0, le=1)
    """Fraction of each delay that is randomised downwards (0 = none, 1 = full jitter)."""

    @model_validator(mode="after")
    def _check_transport_fields(self) -> Self:
        if self.transport == "http":
            if self.url is None:
                raise ValueError("transport 'http' needs url")
            if self.command or self.env or self.cwd is not None:
                raise ValueError("command/env/cwd apply to transport 'stdio' only")
        else:
            if not self.command:
                raise ValueError("transport 'stdio' needs command (an argv list)")
            if self.url is not None or self.headers or self.bearer_token_file is not None:
                raise ValueError("url/headers/bearer_token_file apply to transport 'http' only")
        if self.keepalive_interval_s > 0 and self.liveness_timeout_s <= self.keepalive_interval_s:
            raise ValueError("liveness_timeout_s must exceed keepalive_interval_s")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        lowered = {key.lower() for key in self.headers}
        if "authorization" in lowered and self.bearer_token_file is not None:
            raise ValueError("give either an Authorization header or bearer_token_file, not both")
        return self
