"""MCP over streamable HTTP spoken by hand (httpx, no SDK): what the guard, auth and OAuth tests and
acceptance phases send when the point is the HTTP layer itself — the ``initialize`` request, the headers a
streamable-HTTP POST needs, a legacy session's ``notifications/initialized`` and ``tools/call`` bodies, the
Bearer challenge's parameters and the JSON of an SSE answer."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

__all__ = [
    "ACCEPT",
    "INIT",
    "INITIALIZED",
    "PROTOCOL_VERSION",
    "bearer",
    "challenge",
    "session_headers",
    "sse_data",
    "tools_call",
]

PROTOCOL_VERSION = "2025-11-25"
INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header for ``token`` (none for None)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def session_headers(initialized: httpx.Response) -> dict[str, str]:
    """The headers every later request of the legacy session that ``initialized`` opened carries."""
    return {"Mcp-Session-Id": initialized.headers["mcp-session-id"], "Mcp-Protocol-Version": PROTOCOL_VERSION}


def tools_call(tool: str, arguments: Any, request_id: int = 2) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def challenge(response: httpx.Response) -> dict[str, str]:
    """The parameters of the response's ``WWW-Authenticate: Bearer …`` challenge ({} when there is none)."""
    scheme, _, params = response.headers.get("www-authenticate", "").partition(" ")
    return dict(re.findall(r'(\w+)="([^"]*)"', params)) if scheme == "Bearer" else {}


def sse_data(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer: the body of a JSON answer (the gateway answers so when the
    request's stream would carry nothing else), else the first ``data:`` line of the SSE stream."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    data = next(line for line in response.text.splitlines() if line.startswith("data:"))
    return dict(json.loads(data.removeprefix("data:")))
