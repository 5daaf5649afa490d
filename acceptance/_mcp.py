"""The suite's MCP client of a gateway over streamable HTTP, and the one reader of tool error codes.

Every result the client receives is kept (as wire JSON) so the redaction phase can search all of them.
Calls go out as raw ``tools/call`` requests: the suite inspects results itself and never lets the client
re-validate ``structuredContent`` (relayed tools are passed through untouched).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT

__all__ = ["GatewayClient", "carried", "error_code", "error_of", "structured"]


def error_of(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The structured error of an ``isError`` tool result (wire JSON), or None for a success.

    Accepts every form the gateway has used or may use: ``structuredContent: {"error": {...}}``; the error
    JSON (``{code, message, retryable, details}``, bare or under ``"error"``) in the first text content; or
    a ``_meta`` value holding a dict with ``code``. An error in none of these forms is ``{"code": None}``.
    """
    if result.get("isError") is not True:
        return None
    content = result.get("structuredContent")
    if isinstance(content, dict) and isinstance(content.get("error"), dict):
        return dict(content["error"])
    texts = [b for b in result.get("content") or [] if isinstance(b, dict) and b.get("type") == "text"]
    if texts:
        try:
            parsed = json.loads(texts[0].get("text", ""))
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            inner = parsed.get("error")
            if isinstance(inner, dict) and "code" in inner:
                return dict(inner)
            if "code" in parsed:
                return dict(parsed)
    meta = result.get("_meta")
    if isinstance(meta, dict):
        for value in meta.values():
            if isinstance(value, dict):
                if "code" in value:
                    return dict(value)
                inner = value.get("error")
                if isinstance(inner, dict) and "code" in inner:
                    return dict(inner)
    return {"code": None, "message": texts[0].get("text", "") if texts else ""}


def error_code(result: Mapping[str, Any]) -> str | None:
    """The error code of a failed tool result, None for a success."""
    err = error_of(result)
    return None if err is None else err.get("code")


def structured(result: Mapping[str, Any]) -> dict[str, Any]:
    """``structuredContent`` of a successful result; raises with the result when it failed."""
    if result.get("isError") is True:
        raise AssertionError(f"tool call failed: {json.dumps(result)[:2000]}")
    content = result.get("structuredContent")
    if not isinstance(content, dict):
        raise AssertionError(f"no structuredContent: {json.dumps(result)[:2000]}")
    return content


def carried(result: Mapping[str, Any]) -> str:
    """The field a tool carries once, as its result's second text block (``remote_read``'s content)."""
    structured(result)  # a success, with its schema-valid structuredContent
    blocks = result.get("content")
    if not isinstance(blocks, list) or len(blocks) != 2 or blocks[1].get("type") != "text":
        raise AssertionError(f"no carried text block: {json.dumps(result)[:2000]}")
    text = blocks[1]["text"]
    assert isinstance(text, str)
    return text


class GatewayClient:
    """One MCP session (handshake era, reused) with a gateway; ``seen`` holds every result received."""

    def __init__(self, url: str, headers: Mapping[str, str], seen: list[str]) -> None:
        self._url = url
        self._headers = dict(headers)
        self._seen = seen
        self._stack = AsyncExitStack()
        self._client: Client | None = None

    async def __aenter__(self) -> Self:
        try:
            http = await self._stack.enter_async_context(
                httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(60))
            )
            transport = streamable_http_client(self._url, http_client=http)
            self._client = await self._stack.enter_async_context(Client(transport, mode="legacy", cache=None))
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    @property
    def client(self) -> Client:
        assert self._client is not None, "use GatewayClient as an async context manager"
        return self._client

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, progress: ProgressFnT | None = None
    ) -> dict[str, Any]:
        """``tools/call``; the result as wire JSON. A JSON-RPC error raises ``mcp.MCPError``. ``progress``
        receives the call's progress notifications."""
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        session = self.client.session
        result = await session.send_request(request, types.CallToolResult, progress_callback=progress)
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        self._seen.append(json.dumps(wire))
        return wire

    async def tool_names(self) -> list[str]:
        names: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.client.list_tools(cursor=cursor)
            self._seen.append(page.model_dump_json(by_alias=True))
            names.extend(tool.name for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return names
