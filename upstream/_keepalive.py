"""Idle liveness: ping a quiet connection so a wedged or silently dropped upstream is noticed early."""

from __future__ import annotations

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from upstream._calls import Outcome, classify
from upstream._connection import Connection
from upstream._settings import UpstreamSettings

__all__ = ["keepalive"]


async def keepalive(conn: Connection, settings: UpstreamSettings, protocol_version: str | None) -> None:
    """Ping ``conn`` every ``keepalive_interval_s`` while it is idle; an unanswered or failed ping marks it
    lost, and the supervisor reconnects. Nothing is ambiguous here: no call was in flight. Skipped while
    calls run (they probe the connection themselves) and on 2026-07-28+ connections (no ping there)."""
    interval = settings.keepalive_interval_s
    if interval <= 0 or protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return
    while not conn.lost.is_set():
        await anyio.sleep(interval)
        if conn.in_flight:
            continue
        try:
            with anyio.fail_after(settings.keepalive_timeout_s):
                await conn.session().send_ping()
        except TimeoutError:
            conn.mark_lost("KeepaliveTimeout")
        except MCPError as exc:
            outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
            if outcome is not Outcome.REJECTED:
                conn.mark_lost(error_class)
