"""libtmux-mcp as the real upstream of the gateway, over stdio and over streamable HTTP.

A client of the gateway must see exactly the tool definitions a direct client of libtmux-mcp sees, and a
terminal round trip (create_session → send_keys → wait_for_text → capture_pane) must work through the
gateway. Skipped when tmux is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.gateway.test_relay import Inbox, all_tools, dump, serve_gateway, upstream_health, wait_listed
from tests.upstream.conftest import free_port, stop_process, wait_for_port
from tests.upstream.test_libtmux import BIN, libtmux_env, spawn_libtmux_http, text_of

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ROUND_TRIP_TOOLS = {"create_session", "send_keys", "wait_for_text", "capture_pane"}


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    name = f"gw-relay-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, check=False, timeout=10)
        tmpdir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (tmpdir / name).unlink(missing_ok=True)


@pytest.fixture
async def libtmux_url(tmux_socket: str) -> AsyncIterator[str]:
    port = free_port()
    proc = spawn_libtmux_http(tmux_socket, port)
    try:
        await wait_for_port(port, proc, ceiling_s=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(proc)


async def relay_and_compare(tmp_path: Path, conn: dict[str, Any], direct: Any) -> None:
    with anyio.fail_after(45):
        async with Client(direct, mode="legacy", cache=None) as client:
            expected = await all_tools(client)
            server_info = client.server_info
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[{"connection": conn}]) as (client, _):
        with anyio.fail_after(45):
            await wait_listed(client, inbox, ROUND_TRIP_TOOLS)
            upstream_names = {tool.name for tool in expected}
            relayed = [tool for tool in await all_tools(client) if tool.name in upstream_names]
            up = await upstream_health(client, "tmux")
            await round_trip(client)
    assert len(expected) >= 40
    assert [dump(tool) for tool in relayed] == [dump(tool) for tool in expected]
    assert up["dropped"] == []
    assert up["renamed"] == []
    assert up["relayed_tools"] == len(expected)
    assert server_info is not None
    assert (up["server_name"], up["server_version"]) == (server_info.name, server_info.version)


async def round_trip(client: Client) -> None:
    marker = f"GW-{uuid.uuid4().hex[:8]}"
    created = await client.call_tool("create_session", {"session_name": "gateway-roundtrip"})
    assert created.is_error is not True, text_of(created)
    assert isinstance(created.structured_content, dict)
    pane_id = created.structured_content["active_pane_id"]
    sent = await client.call_tool("send_keys", {"keys": f"echo {marker}-$((6*7))", "pane_id": pane_id})
    assert sent.is_error is not True, text_of(sent)
    waited = await client.call_tool("wait_for_text", {"patterns": [f"{marker}-42"], "pane_id": pane_id})
    assert waited.is_error is not True, text_of(waited)
    captured = await client.call_tool("capture_pane", {"pane_id": pane_id})
    assert isinstance(captured, types.CallToolResult)
    assert f"{marker}-42" in text_of(captured)


async def test_through_the_gateway_libtmux_over_stdio_looks_identical_and_a_pane_round_trip_works(
    tmp_path: Path, tmux_socket: str
) -> None:
    command = [str(BIN / "libtmux-mcp")]
    env = libtmux_env(tmux_socket)
    conn = {"name": "tmux", "transport": "stdio", "command": command, "env": env, "connect_timeout_s": 30}
    await relay_and_compare(tmp_path, conn, StdioServerParameters(command=command[0], env=env))


async def test_through_the_gateway_libtmux_over_http_looks_identical_and_a_pane_round_trip_works(
    tmp_path: Path, libtmux_url: str
) -> None:
    conn = {"name": "tmux", "transport": "http", "url": libtmux_url, "connect_timeout_s": 30}
    await relay_and_compare(tmp_path, conn, libtmux_url)
