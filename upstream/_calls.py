"""What a failed request means, and the paginated tools/list walk.

`classify` is the one place where the SDK's `MCPError` is interpreted: whether the request
provably never ran (not sent, or "session not found"), whether the connection broke after it
was sent (ambiguous), or whether the upstream itself answered with a JSON-RPC error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from upstream._transport import LOCAL_MARK

__all__ = ["Outcome", "call_params", "classify", "leg_meta", "list_all_tools"]

_PAGE_CAP: Final = 100
# Messages the SDK itself synthesises (never from the peer) when a transport breaks.
_SDK_TRANSPORT_MESSAGES: Final = (
    "Connection closed",
    "SSE stream ended without a response",
    "SSE stream failed",
)
_SESSION_NOT_FOUND_CODES: Final = (types.INVALID_REQUEST, -32001)
_RESERVED_META_PREFIX: Final = "io.modelcontextprotocol/"


class Outcome(enum.Enum):
    NOT_SENT = "not_sent"
    """The request provably never reached the upstream (connect failure, connection already gone)."""
    SESSION_NOT_FOUND = "session_not_found"
    """The upstream rejected the request because it does not know the session: nothing ran."""
    LOST = "lost"
    """The transport broke after the request was sent: it may or may not have run."""
    REJECTED = "rejected"
    """The upstream answered with a JSON-RPC error."""


def is_session_not_found(exc: MCPError) -> bool:
    """HTTP 404 / -32600 "Session not found" (this SDK), -32001 "Session not found" (Node SDK),
    or -32600 "Session terminated" (this SDK's client for a bare 404 on a known session)."""
    if exc.code not in _SESSION_NOT_FOUND_CODES:
        return False
    message = exc.message.lower()
    return "session not found" in message or (
        exc.code == types.INVALID_REQUEST and message == "session terminated"
    )


def classify(exc: MCPError, *, tag: str, connection_lost: bool) -> tuple[Outcome, str]:
    """Return what `exc` means for the request that raised it, and an error class for reports."""
    data = exc.data
    if isinstance(data, Mapping) and data.get(LOCAL_MARK) == tag:
        error_class = str(data.get("error_class", "TransportError"))
        return (Outcome.LOST if data.get("sent", True) else Outcome.NOT_SENT), error_class
    if is_session_not_found(exc):
        return Outcome.SESSION_NOT_FOUND, "SessionNotFound"
    if exc.code == types.CONNECTION_CLOSED and (
        connection_lost or exc.message.startswith(_SDK_TRANSPORT_MESSAGES)
    ):
        return Outcome.LOST, "ConnectionClosed"
    return Outcome.REJECTED, "MCPError"


def leg_meta(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The caller's `_meta` as it may travel on to the upstream: without its progressToken (progress is
    relayed per call) and without the reserved `io.modelcontextprotocol/` keys — the 2026-07-28 request
    envelope (protocol version, client info, capabilities) describes the caller's leg, and a handshake-era
    upstream refuses a request carrying it; the upstream leg's SDK writes its own."""
    kept = {
        k: v
        for k, v in (meta or {}).items()
        if k not in ("progressToken", "progress_token") and not k.startswith(_RESERVED_META_PREFIX)
    }
    return kept or None


def call_params(
    name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
) -> types.CallToolRequestParams:
    """Build tools/call params; the caller's `_meta` as `leg_meta` keeps it."""
    wire: dict[str, Any] = {"name": name}
    if arguments is not None:
        wire["arguments"] = dict(arguments)
    kept = leg_meta(meta)
    if kept:
        wire["_meta"] = kept
    return types.CallToolRequestParams.model_validate(wire, by_alias=True)


async def list_all_tools(session: ClientSession) -> tuple[types.Tool, ...]:
    """Walk tools/list pages to the end (bounded); tool objects are returned as validated, unchanged."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(_PAGE_CAP):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.send_request(types.ListToolsRequest(params=params), types.ListToolsResult)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tuple(tools)
        if cursor in seen:
            raise MCPError(types.INTERNAL_ERROR, f"tools/list repeated cursor {cursor!r}")
        seen.add(cursor)
    raise MCPError(types.INTERNAL_ERROR, f"tools/list did not end within {_PAGE_CAP} pages")
