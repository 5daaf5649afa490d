"""A POSTed request whose SSE stream would carry nothing but its answer is answered as ``application/json``.

Streamable HTTP lets a server answer each POSTed request either way: "the server MUST either return
``Content-Type: text/event-stream``, to initiate an SSE stream, or ``Content-Type: application/json``, to
return one JSON object. The client MUST support both these cases" (MCP 2025-03-26 and every later revision).
The SDK's transport chooses once for a whole session, and the gateway needs the stream: progress while a call
waits for an approval, URL elicitations, an upstream's own messages relayed during its call. Most calls send
nothing before their answer, though, and for them the stream is only cost — on the client side most of all:
the Python SDK client splits the stream into lines and events and formats every event for a debug log
(~12 ms per MiB of answer here, more than the whole rest of a 1 MiB ``remote_read`` on the gateway's side).

So this middleware holds back the start of an SSE answer until the stream's first event is known:

* that event is the request's own JSON-RPC response (the SDK's transport ends the stream right after it): its
  data is sent as the body of a plain JSON response, same status and headers but for the content type and
  length; what the inner app sends afterwards (the end of the stream) is dropped;
* anything else comes first — a notification, a server request, an event with an id (resumability), a
  keep-alive comment (``sse_starlette`` pings every 15 s, so a call that runs longer streams as before), a
  stream that ends empty: the held start goes out unchanged, and everything after it.

The test of "the request's own response" reads only the start of the event's data, which the SDK writes as
``{"jsonrpc":"2.0","id":…,"result"`` (or ``"error"``); anything that does not read so is streamed, which is
always correct. Nothing but the framing changes: the JSON bytes are the SDK's own.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AnswerAsJson", "sole_answer"]

_PREFIX = b"event: message\r\ndata: "
_SUFFIX = b"\r\n\r\n"
_RESPONSE = re.compile(rb'\{"jsonrpc":"2\.0","id":(?:-?\d+|"(?:[^"\\]|\\.){0,256}"),"(?:result|error)":')
_SSE = b"text/event-stream"
_DROPPED = {b"content-type", b"content-length", b"transfer-encoding", b"connection", b"x-accel-buffering"}


def sole_answer(chunk: bytes) -> bytes | None:
    """The JSON-RPC response carried by one SSE event ``chunk`` as the SDK writes it, else None."""
    if not chunk.startswith(_PREFIX) or not chunk.endswith(_SUFFIX):
        return None
    end = len(chunk) - len(_SUFFIX)
    if chunk.find(b"\n", len(_PREFIX)) != end + 1 or chunk.find(b"\r", len(_PREFIX)) != end:
        return None  # more than one data line, or more than one event
    if _RESPONSE.match(chunk, len(_PREFIX)) is None:
        return None
    return chunk[len(_PREFIX) : end]


def _is_sse(message: Message) -> bool:
    return message.get("status") == 200 and any(
        name.lower() == b"content-type" and value.lower().startswith(_SSE)
        for name, value in message.get("headers", ())
    )


def _json_start(start: Message, length: int) -> Message:
    headers = [(name, value) for name, value in start.get("headers", ()) if name.lower() not in _DROPPED]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    return {**start, "headers": headers}


class AnswerAsJson:
    """ASGI middleware around the MCP route (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        state = "undecided"  # → "stream" (pass everything) or "answered" (drop the rest)

        async def relay(message: Message) -> None:
            nonlocal held, state
            if state == "stream":
                await send(message)
                return
            if state == "answered":
                return
            kind: Any = message["type"]
            if kind == "http.response.start":
                if _is_sse(message):
                    held = message
                    return
                state = "stream"
                await send(message)
                return
            if kind == "http.response.body" and held is not None:
                chunk: bytes = message.get("body", b"")
                more = bool(message.get("more_body", False))
                if not chunk and more:
                    return  # an empty piece decides nothing
                answer = sole_answer(chunk) if chunk else None
                if answer is not None:
                    state = "answered"
                    await send(_json_start(held, len(answer)))
                    await send({"type": "http.response.body", "body": answer, "more_body": False})
                    return
                state = "stream"
                start, held = held, None
                await send(start)
            await send(message)

        await self.app(scope, receive, relay)
        if state == "undecided" and held is not None:  # the stream started and ended without a body
            await send(held)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
