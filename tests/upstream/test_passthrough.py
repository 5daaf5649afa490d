"""Tools and results pass through unchanged; upstream JSON-RPC errors keep their code, message and data."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from tests.fixtures.mcp_client import all_tools
from tests.upstream.conftest import FaultServer
from upstream import Upstream, UpstreamRejected

pytestmark = pytest.mark.anyio


def dump(tools: list[types.Tool]) -> list[dict[str, Any]]:
    return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in tools]


async def test_paginated_tool_list_is_flattened_and_identical_to_a_direct_client(
    fault_http: FaultServer,
) -> None:
    with anyio.fail_after(20):
        async with Client(fault_http.url, mode="legacy", cache=None) as client:
            expected = await all_tools(client)
        async with Upstream(fault_http.settings()) as up:
            relayed = await up.list_tools()
    assert len(expected) == 12  # three pages of four
    assert dump(relayed) == dump(expected)
    echo = next(tool for tool in relayed if tool.name == "echo")
    assert echo.title == "Echo"
    assert echo.meta == {"example.org/owner": "fault-upstream", "nested": {"k": [1, 2]}}
    assert echo.annotations is not None
    assert echo.annotations.read_only_hint is True
    assert echo.output_schema is not None


async def test_results_are_returned_unchanged_without_output_schema_revalidation(
    fault_http: FaultServer,
) -> None:
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            mismatch = await up.call_tool("mismatch", {})
            failing = await up.call_tool("failing", {})
            echo = await up.call_tool("echo", {"text": "héllo"}, meta={"trace": "t-1", "progressToken": 99})
    assert mismatch.structured_content == {"n": "not-an-integer"}
    assert mismatch.is_error is False
    assert failing.is_error is True
    assert failing.content == [types.TextContent(type="text", text="it failed")]
    assert echo.structured_content == {"text": "héllo"}


async def test_upstream_json_rpc_error_is_raised_with_its_code_message_and_data(
    fault_http: FaultServer,
) -> None:
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            with pytest.raises(UpstreamRejected) as info:
                await up.call_tool("reject", {})
            with pytest.raises(UpstreamRejected) as unknown:
                await up.call_tool("no-such-tool", {})
            still_fine = await up.call_tool("count", {"call_id": "after-reject"})
    assert (info.value.code, info.value.message) == (-32602, "rejected on purpose")
    assert info.value.data == {"field": "nothing", "why": ["planned"]}
    assert info.value.retryable is False
    assert unknown.value.code == types.METHOD_NOT_FOUND
    assert still_fine.is_error is False
    assert up.health().ambiguous_losses == 0


async def test_progress_notifications_are_relayed_to_the_callers_callback(fault_http: FaultServer) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            result = await up.call_tool("progress", {"steps": 3}, progress=on_progress)
    assert result.content == [types.TextContent(type="text", text="3 steps")]
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


async def test_list_changed_refetches_the_tools_and_calls_the_registered_callback(
    fault_http: FaultServer,
) -> None:
    published: list[list[str]] = []
    send, receive = anyio.create_memory_object_stream[list[str]](10)

    async def on_tools_changed(tools: tuple[types.Tool, ...]) -> None:
        names = [tool.name for tool in tools]
        published.append(names)
        await send.send(names)

    async with send, receive, Upstream(fault_http.settings(), on_tools_changed=on_tools_changed) as up:
        with anyio.fail_after(20):
            first = await receive.receive()  # the first connect publishes the list
            assert "added" not in first
            await fault_http.wait_standalone_stream()  # where the server sends list_changed
            await up.call_tool("add_tool", {"name": "added"})
            second = await receive.receive()
            assert second[-1] == "added"
            assert [tool.name for tool in await up.list_tools()] == second
        assert up.health().tool_count == len(second)
