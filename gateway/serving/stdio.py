"""stdio answers every request line, even one that cannot be parsed.

The SDK's stdio transport turns a line it cannot parse (invalid JSON, nesting beyond the parser's limit, a
lone surrogate escape, valid JSON that is no JSON-RPC message) into an ``Exception`` on the read stream,
and the server only logs it at debug level: the client gets no reply and waits forever. The gateway sits
between the transport and the server (:class:`AnswerUnparseable`) and answers each such line itself, as
JSON-RPC 2.0 asks: ``-32700`` Parse error for a line that is not JSON, ``-32600`` Invalid Request for JSON
that is no JSON-RPC message, with the request's ``id`` when it can be recovered (else ``null``). It logs a
warning (reason and length, never the line: it may hold a secret) and keeps serving.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.shared._stream_protocols import ReadStream, WriteStream  # server.run() types; no public name
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from upstream import DelegatingReadStream

__all__ = ["AnswerUnparseable", "recover_id"]

_log = structlog.get_logger("gateway.stdio")
_MAX_REASON = 200
_DECODER = json.JSONDecoder()


def _flat_value(text: str, at: int) -> tuple[Any, int] | None:
    """Decode a string or number at ``at`` (flat values only: no recursion), or None."""
    if at >= len(text) or text[at] not in '"-0123456789':
        return None
    try:
        return _DECODER.raw_decode(text, at)
    except ValueError:
        return None


def _skip_ws(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _usable_id(value: Any) -> int | str | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # an id holding a lone surrogate could not be sent back
        except UnicodeEncodeError:
            return None
        return value
    return None


def recover_id(line: str) -> int | str | None:
    """The top-level ``"id"`` of a JSON-RPC object, found without parsing the rest (which may be nested
    beyond any parser's limit, or malformed further on). None when there is none to be found."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    depth, at, expect_key = 0, 0, False
    while at < len(text):
        ch = text[at]
        if ch == '"':
            decoded = _flat_value(text, at)
            if decoded is None:
                return None
            value, end = decoded
            if depth == 1 and expect_key:
                expect_key = False
                colon = _skip_ws(text, end)
                if value == "id" and colon < len(text) and text[colon] == ":":
                    found = _flat_value(text, _skip_ws(text, colon + 1))
                    return _usable_id(found[0]) if found is not None else None
            at = end
            continue
        if ch in "{[":
            depth += 1
            expect_key = depth == 1 and ch == "{"
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 1:
            expect_key = True
        at += 1
    return None


def _reply_for(exc: Exception) -> tuple[int, str, str | None, int] | None:
    """(JSON-RPC code, message, raw line if known, line length) for a transport exception; None to skip."""
    if not isinstance(exc, ValidationError):
        return types.PARSE_ERROR, "Parse error", None, 0
    errors = exc.errors(include_url=False, include_context=False)
    first = errors[0] if errors else {"type": "", "msg": "", "input": None}
    raw = first.get("input")
    if first["type"] == "json_invalid":
        line = raw if isinstance(raw, str) else None
        if line is not None and not line.strip():
            return None  # a blank line between messages: nothing was asked
        reason = str(first["msg"]).removeprefix("Invalid JSON: ")[:_MAX_REASON]
        return types.PARSE_ERROR, f"Parse error: {reason}", line, len(line or "")
    # Valid JSON, but no JSON-RPC message: the parsed value is the input (recover the id from it).
    line = json.dumps(raw) if isinstance(raw, dict) else None
    return types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message", line, len(line or "")


class AnswerUnparseable(DelegatingReadStream[SessionMessage | Exception]):
    """A read stream that passes messages through and answers unparseable lines on ``write_stream``."""

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception],
        write_stream: WriteStream[SessionMessage],
    ) -> None:
        super().__init__(inner)
        self._write = write_stream

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await super().receive()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    async def _answer(self, exc: Exception) -> None:
        reply = _reply_for(exc)
        if reply is None:
            return
        code, message, line, length = reply
        request_id = recover_id(line) if line is not None else None
        _log.warning("unparseable_request", jsonrpc_code=code, reason=message, id=request_id, length=length)
        error = types.JSONRPCError(
            jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
        )
        try:
            await self._write.send(SessionMessage(error))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            _log.debug("unparseable_request_not_answered", reason="stdout closed")
