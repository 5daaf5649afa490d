"""Health snapshot of one upstream, and the mutable counters behind it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["UpstreamHealth", "UpstreamState"]

UpstreamState = Literal["starting", "connected", "reconnecting", "down", "stopped"]
"""starting: an attempt in flight, never connected yet; connected: a verified connection is published;
reconnecting: a later attempt in flight; down: waiting out the backoff; stopped: not running."""


class UpstreamHealth(BaseModel):
    """What the gateway shows about one upstream (no secrets, no URLs with credentials)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    transport: Literal["http", "stdio"]
    state: UpstreamState
    protocol_version: str | None
    server_name: str | None
    server_version: str | None
    tool_count: int | None
    connected_since: str | None
    connect_attempts: int
    """Every connection attempt, the first one included."""
    connect_successes: int
    """Attempts that ended with a functional tools/list (the first connect included)."""
    attempts_in_flight_max: int
    """Most connection attempts ever in flight at once (single-flight: never above 1)."""
    ambiguous_losses: int
    session_not_found_retries: int
    last_error_class: str | None
    last_error: str | None
    """What went wrong last, in words (names the command that could not be started, the time limit
    that applied); built from the gateway's own knowledge, never from the upstream's messages."""
    last_error_at: str | None
    """UTC ISO-8601 time of the last error."""
    consecutive_failures: int
    """Failed connection attempts since the last working connection (0 while connected)."""
    retry_delay_s: float | None
    """The wait chosen before the next attempt (capped exponential with jitter), while down."""
    last_probe_ok_at: str | None
    """UTC ISO-8601 time of the last answered liveness probe on the current connection."""


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class Stats:
    connect_attempts: int = 0
    connect_successes: int = 0
    attempts_in_flight: int = 0
    attempts_in_flight_max: int = 0
    ambiguous_losses: int = 0
    session_not_found_retries: int = 0
    last_error_class: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    consecutive_failures: int = 0
    retry_delay_s: float | None = None
    last_probe_ok_at: str | None = None

    def record_error(self, error_class: str, description: str | None = None) -> None:
        self.last_error_class = error_class
        self.last_error = description or error_class
        self.last_error_at = utc_now_iso()
