"""A request whose SSE stream would carry only its answer is answered as ``application/json``; any other
stream (progress first, an event id, a keep-alive comment, an empty stream) goes out as SSE, unchanged.

The middleware is driven with a real ``sse_starlette`` response as its inner app (what the SDK's transport
answers with), through httpx's ASGI transport; the last two tests drive a real gateway subprocess with the
SDK client, once for an own tool and once for a relayed tool that reports progress before its answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gateway.serving.answer import AnswerAsJson, sole_answer
from gateway.serving.sse import fast_encode
from tests.fixtures.gateway_proc import run_gateway
from tests.gateway.test_relay import entry
from tests.upstream.conftest import FaultServer

RESPONSE = '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"a\\nb"}]}}'
ERROR = '{"jsonrpc":"2.0","id":"r-1","error":{"code":-32601,"message":"Method not found"}}'
PROGRESS = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
REQUEST = '{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{}}'
pytestmark = pytest.mark.anyio


def _event(data: str, **kw: Any) -> bytes:
    return fast_encode(ServerSentEvent(data, event="message", **kw))


def test_the_sdks_one_event_answer_is_recognised_as_the_sole_answer() -> None:
    assert sole_answer(_event(RESPONSE)) == RESPONSE.encode()
    assert sole_answer(_event(ERROR)) == ERROR.encode()


@pytest.mark.parametrize(
    "chunk",
    [
        _event(PROGRESS),  # a notification first: the call streams
        _event(REQUEST),  # a server request (an elicitation) first
        _event(RESPONSE, id="e-1"),  # an event id: resumable, left as it is
        _event(RESPONSE) + _event(RESPONSE),  # two events in one piece
        b"event: message\r\ndata: " + RESPONSE.encode() + b"\r\ndata: x\r\n\r\n",  # two data lines
        b": ping - 2026-12-04 00:00:00\r\n\r\n",  # sse_starlette's keep-alive comment
        b"event: message\r\ndata: " + RESPONSE.encode() + b"\r\n",  # not a whole event
        _event(""),  # a priming event
    ],
)
def test_anything_else_is_not_taken_for_the_sole_answer(chunk: bytes) -> None:
    assert sole_answer(chunk) is None


def _sse_app(*items: str | ServerSentEvent, status: int = 200) -> Any:
    async def events() -> AsyncIterator[ServerSentEvent]:
        for item in items:
            yield item if isinstance(item, ServerSentEvent) else ServerSentEvent(item, event="message")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = EventSourceResponse(events(), status_code=status, headers={"mcp-session-id": "s-1"})
        await response(scope, receive, send)

    return app


async def _post(app: Any, method: str = "POST") -> httpx.Response:
    transport = httpx.ASGITransport(app=AnswerAsJson(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        with anyio.fail_after(10):
            return await http.request(method, "/mcp", content=b"{}")


async def test_a_stream_of_only_the_answer_goes_out_as_one_json_body_with_the_same_headers() -> None:
    got = await _post(_sse_app(RESPONSE))
    assert got.status_code == 200
    assert got.headers["content-type"] == "application/json"
    assert got.headers["content-length"] == str(len(RESPONSE))
    assert got.headers["mcp-session-id"] == "s-1"
    assert got.content == RESPONSE.encode()
    assert json.loads(got.content)["result"]["content"][0]["text"] == "a\nb"


@pytest.mark.parametrize(
    "items",
    [
        (PROGRESS, RESPONSE),  # progress before the answer: both, in order, on the stream
        (REQUEST, RESPONSE),
        (ServerSentEvent(RESPONSE, event="message", id="e-1"),),
        (ServerSentEvent(comment="ping"), RESPONSE),  # a keep-alive first: a long call streams as before
    ],
)
async def test_a_stream_with_anything_before_or_around_the_answer_stays_a_stream(
    items: tuple[str | ServerSentEvent, ...],
) -> None:
    got = await _post(_sse_app(*items))
    assert got.headers["content-type"].startswith("text/event-stream")
    assert "content-length" not in got.headers
    events = [i if isinstance(i, ServerSentEvent) else ServerSentEvent(i, event="message") for i in items]
    expected = b"".join(fast_encode(event) for event in events)
    assert got.content == expected


async def test_a_stream_that_ends_empty_is_sent_as_the_empty_stream_it_is() -> None:
    got = await _post(_sse_app())
    assert got.status_code == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.content == b""


async def test_other_responses_and_other_methods_pass_untouched() -> None:
    async def accepted(scope: Scope, receive: Receive, send: Send) -> None:
        await Response(status_code=202)(scope, receive, send)

    async def denied(scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse({"error": "invalid_token"}, status_code=401)(scope, receive, send)

    async def stream_on_get(scope: Scope, receive: Receive, send: Send) -> None:
        assert Request(scope).method == "GET"
        await _sse_app(RESPONSE)(scope, receive, send)

    assert (await _post(accepted)).status_code == 202
    refused = await _post(denied)
    assert (refused.status_code, refused.json()) == (401, {"error": "invalid_token"})
    not_found = await _post(_sse_app(RESPONSE, status=404))
    assert not_found.headers["content-type"].startswith("text/event-stream")
    on_get = await _post(stream_on_get, method="GET")  # the standalone GET stream is never touched
    assert on_get.headers["content-type"].startswith("text/event-stream")
    assert on_get.content == _event(RESPONSE)


async def _types_seen(
    gw: Any, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[str], list[Any], list[float]]:
    """Each POST's answer content type, the results of ``calls`` and the progress values heard."""
    seen: list[str] = []
    progress: list[float] = []

    async def record(response: httpx2.Response) -> None:
        if response.request.method == "POST" and response.status_code == 200:
            seen.append(response.headers.get("content-type", ""))

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    http = httpx2.AsyncClient(headers=gw.headers(), timeout=30, event_hooks={"response": [record]})
    results = []
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
        with anyio.fail_after(60):
            for name, args in calls:
                seen.clear()
                results.append(await client.call_tool(name, args, progress_callback=on_progress))
    return seen, results, progress


@pytest.mark.slow
async def test_a_real_gateway_answers_an_own_tool_call_as_json_and_the_client_reads_it(
    tmp_path: Path,
) -> None:
    with run_gateway(tmp_path) as gw:
        seen, [result], _ = await _types_seen(gw, [("gateway_health", {})])
    assert seen  # the call (and the tool list the client reads to check its output schema)
    assert set(seen) == {"application/json"}
    assert result.is_error is not True
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["pid"] == gw.pid


@pytest.mark.slow
async def test_a_relayed_call_that_reports_progress_first_streams_it_to_the_client(
    tmp_path: Path, fault: FaultServer
) -> None:
    with run_gateway(tmp_path, {"upstreams": [entry(fault)]}) as gw:
        assert "progress" in {t.name for t in await _list(gw)}  # a first list waits for the upstream
        seen, [result], progress = await _types_seen(gw, [("progress", {"steps": 3})])
    kinds = [kind.split(";")[0] for kind in seen]
    assert kinds.count("text/event-stream") == 1  # the call; a tool list the client reads is plain JSON
    assert set(kinds) <= {"text/event-stream", "application/json"}
    assert result.is_error is not True
    assert progress == [1.0, 2.0, 3.0]


async def _list(gw: Any) -> list[Any]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=30)
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
        return list((await client.list_tools()).tools)
