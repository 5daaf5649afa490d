"""Build the MCP client connection to one upstream. The only module that touches httpx2.

Two liveness hooks are installed here, so the supervisor learns of a dead upstream without
polling:

* the read stream the SDK session consumes is wrapped (a `upstream._streams.DelegatingReadStream`):
  end-of-stream (stdio process exit, HTTP transport teardown) reports the connection lost;
* for HTTP, the httpx2 transport is wrapped: a transport error reports the connection lost and,
  for a POST, is turned into a synthetic JSON-RPC error answer tagged with this connection's
  `tag` and whether the request can have reached the server (`sent`). A connect failure proves
  the request never left, so the caller may safely send it again on the next connection.
  Without the wrapper the SDK would only report a bare "Connection closed" for both cases.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ElicitationFnT, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream  # the transports' stream type; no public name
from mcp.shared.message import SessionMessage

from upstream._settings import UpstreamSettings
from upstream._spawned import SpawnedProcess, spawned_stdio
from upstream._stderr import StderrCallback, stderr_pipe
from upstream._streams import DelegatingReadStream

__all__ = ["LOCAL_MARK", "SecretCallback", "open_client"]

LOCAL_MARK: Final = "upstream.local"
"""Key in a synthetic error's `data` naming the connection tag that produced it."""

_CLIENT_INFO: Final = types.Implementation(name="remoteops-gateway-upstream", version="0.1.0")
# Transport errors that prove the request never reached the server.
_NOT_SENT: Final = (
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    httpx2.PoolTimeout,
    httpx2.UnsupportedProtocol,
)

LostFn = Callable[[str], None]
SecretCallback = Callable[[str], None]
"""Receives every credential this package reads at runtime (a bearer token file's content, read again
on each connect so it can rotate), before it is used, so the embedding application can redact it."""


class _WatchedReceiveStream(DelegatingReadStream[SessionMessage | Exception]):
    """Delegating read stream that reports end-of-stream as a lost connection."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_lost: LostFn) -> None:
        super().__init__(inner)
        self._on_lost = on_lost

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await super().receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_lost("ConnectionClosed")
            raise


_DRAIN_S: Final = 0.25
_DRAIN_MAX_BYTES: Final = 256 * 1024


class _DrainOnClose(httpx2.AsyncByteStream):
    """A POST response body that is read to its end (bounded) when closed early.

    The SDK closes a tools/call SSE response as soon as the answer event arrives, a moment before the
    server ends the stream; closing an unfinished body discards the keep-alive connection, so every
    call would open a new TCP connection (and leave one in TIME-WAIT). Draining the few remaining bytes
    first returns the connection to the pool; a body that does not end promptly is closed as before.
    """

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._it: AsyncIterator[bytes] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._it = self._inner.__aiter__()
        async for chunk in self._it:
            yield chunk

    async def aclose(self) -> None:
        it = self._it if self._it is not None else self._inner.__aiter__()
        drained = 0
        with anyio.move_on_after(_DRAIN_S):
            try:
                async for chunk in it:
                    drained += len(chunk)
                    if drained > _DRAIN_MAX_BYTES:
                        break
            except (httpx2.HTTPError, anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                pass  # the body could not be finished: the connection is simply not reused
        await self._inner.aclose()


class _GuardedTransport(httpx2.AsyncBaseTransport):
    """httpx2 transport that reports failures and answers failed POSTs with a tagged JSON-RPC error."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, *, tag: str, on_lost: LostFn) -> None:
        self._inner = inner
        self._tag = tag
        self._on_lost = on_lost

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
            # POST only: never the long-lived GET notification stream.
            if request.method == "POST" and isinstance(response.stream, httpx2.AsyncByteStream):
                response.stream = _DrainOnClose(response.stream)
            return response
        except httpx2.TransportError as exc:
            error_class = type(exc).__name__
            self._on_lost(error_class)
            if request.method != "POST":
                raise
            sent = not isinstance(exc, _NOT_SENT)
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": types.CONNECTION_CLOSED,
                    "message": f"upstream transport failed: {error_class}",
                    "data": {LOCAL_MARK: self._tag, "sent": sent, "error_class": error_class},
                },
            }
            return httpx2.Response(
                503,
                headers={"content-type": "application/json"},
                content=json.dumps(body).encode(),
                request=request,
            )

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _watched(inner: AbstractAsyncContextManager[Any], on_lost: LostFn) -> AsyncIterator[Any]:
    async with inner as (read_stream, write_stream):
        yield _WatchedReceiveStream(read_stream, on_lost), write_stream


def _http_headers(settings: UpstreamSettings, on_secret: SecretCallback | None) -> dict[str, str]:
    headers = dict(settings.headers)
    if settings.bearer_token_file is not None:
        # Read on every connect so a rotated token is picked up; never logged.
        token = settings.bearer_token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"bearer token file for upstream {settings.name!r} is empty")
        if on_secret is not None:
            on_secret(token)  # known to the redactor before anything can carry it
        headers["Authorization"] = f"Bearer {token}"
    return headers


@asynccontextmanager
async def _stdio(
    params: StdioServerParameters, settings: UpstreamSettings, on_stderr: StderrCallback | None
) -> AsyncIterator[Any]:
    """stdio_client with the child's stderr on a pipe that is read line by line (never copied raw)."""
    async with (
        stderr_pipe(settings.name, on_stderr) as sink,
        stdio_client(params, errlog=sink.file) as streams,
    ):
        sink.spawned()  # the child holds its end now; ours is closed so its exit ends the reader
        yield streams


_KEEPALIVE_EXPIRY_S = 4.0


def _http_client(
    settings: UpstreamSettings, tag: str, on_lost: LostFn, on_secret: SecretCallback | None
) -> httpx2.AsyncClient:
    """The httpx2 client of one HTTP connection: guarded transport, bounded timeouts, no redirects.
    Reads the bearer token file (on every connect, so a rotated token is picked up)."""
    timeout = httpx2.Timeout(
        settings.connect_timeout_s,
        connect=settings.connect_timeout_s,
        read=settings.call_timeout_s + 30.0,
    )
    # An idle connection is dropped after 4 s, before the 5 s after which uvicorn and Node close theirs: a
    # request sent on a connection the server is closing at that moment fails after it was sent (ambiguous:
    # never replayed), seen under load as a lost connection between two calls 5 s apart.
    pool = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(keepalive_expiry=_KEEPALIVE_EXPIRY_S))
    guarded = _GuardedTransport(pool, tag=tag, on_lost=on_lost)
    return httpx2.AsyncClient(
        headers=_http_headers(settings, on_secret),
        timeout=timeout,
        transport=guarded,
        follow_redirects=False,
    )


@asynccontextmanager
async def open_client(
    settings: UpstreamSettings,
    *,
    tag: str,
    on_lost: LostFn,
    message_handler: MessageHandlerFnT,
    elicitation_callback: ElicitationFnT | None = None,
    on_stderr: StderrCallback | None = None,
    on_secret: SecretCallback | None = None,
    spawned: SpawnedProcess | None = None,
) -> AsyncIterator[Client]:
    """Connect to the upstream and complete the handshake; the yielded `Client` is ready for requests.
    One `Client` for both transports: only the streams it is given differ (`_stdio`, or
    `streamable_http_client` over `_http_client`, which stays open until the client has closed).

        `elicitation_callback`, when given, declares the elicitation capability and answers the
        upstream's elicitation/create requests. `on_stderr` receives a stdio upstream's stderr lines
        (default: the `upstream.stderr` logger); `on_secret` every credential read for this connect.
        A stdio upstream's stdout is decoded as UTF-8 with replacement, like the gateway's own stdin.
        `spawned`: a stdio upstream's process already started (it matches the settings), talked to
        instead of spawning one; it is stopped and reaped when the client closes.
        Raises whatever the spawn, connect or handshake raised (the supervisor records it and retries).
    """
    streams: AbstractAsyncContextManager[Any]
    async with AsyncExitStack() as stack:
        if settings.transport == "http":
            if settings.url is None:  # pragma: no cover - UpstreamSettings requires it
                raise ValueError("transport 'http' needs url")
            http_client = await stack.enter_async_context(_http_client(settings, tag, on_lost, on_secret))
            streams = streamable_http_client(settings.url, http_client=http_client)
        elif spawned is not None:
            streams = spawned_stdio(spawned, settings.name, on_stderr)
        else:
            params = StdioServerParameters(
                command=settings.command[0],
                args=list(settings.command[1:]),
                env=dict(settings.env) or None,
                cwd=settings.cwd,
                encoding_error_handler="replace",
            )
            streams = _stdio(params, settings, on_stderr)
        async with Client(
            _watched(streams, on_lost),
            mode=settings.mode,
            cache=None,
            message_handler=message_handler,
            elicitation_callback=elicitation_callback,
            client_info=_CLIENT_INFO,
        ) as client:
            yield client
