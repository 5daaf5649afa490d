"""Liveness: probe the upstream on its own schedule, idle or busy, and declare a silent one lost.

Every `keepalive_interval_s` a probe goes out (a ping; `server/discover` on 2026-07-28+ connections,
which have no ping), whether or not calls are in flight: a frozen (SIGSTOP) upstream answers neither
its calls nor its probes, while one working on a long call still answers probes. A probe waits only
until `liveness_timeout_s` after the last answered one; when that passes, the connection is declared
lost with `abort`, so calls in flight end as ambiguous at that moment, and the supervisor reconnects.
Each probe runs as a connection request, so a probe stuck on a wedged transport never holds the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from upstream._calls import Outcome, classify
from upstream._connection import Abandoned, Connection
from upstream._settings import UpstreamSettings

__all__ = ["LIVENESS_LOST", "liveness"]

LIVENESS_LOST = "LivenessTimeout"


def _probe(session: ClientSession, protocol_version: str | None) -> Callable[[], Awaitable[object]]:
    if protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        return session.send_ping
    return session.discover


async def liveness(
    conn: Connection,
    settings: UpstreamSettings,
    protocol_version: str | None,
    on_answer: Callable[[], None],
) -> None:
    """Probe ``conn`` until it is lost; ``on_answer`` is called after each answered probe."""
    interval = settings.keepalive_interval_s
    if interval <= 0:
        return
    probe = _probe(conn.session(), protocol_version)
    last_answer = anyio.current_time()
    next_probe = last_answer + interval
    while not conn.lost.is_set():
        await anyio.sleep(max(0.0, next_probe - anyio.current_time()))
        next_probe = anyio.current_time() + interval
        try:
            await conn.request(
                probe, limit_s=last_answer + settings.liveness_timeout_s - anyio.current_time()
            )
        except Abandoned as exc:
            if exc.timed_out:
                conn.mark_lost(LIVENESS_LOST, abort=True)
            return
        except MCPError as exc:
            outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
            if outcome is not Outcome.REJECTED:
                conn.mark_lost(error_class)
                return
            # A JSON-RPC error answer (e.g. a server without ping) still proves the upstream is alive.
        except Exception:  # boundary: an invalid answer is still an answer; the loop must not die
            if conn.lost.is_set():
                return
        last_answer = anyio.current_time()
        on_answer()
