"""libtmux-mcp as the real upstream of the gateway, over stdio and over streamable HTTP.

A client of the gateway must see exactly the tool definitions a direct client of libtmux-mcp sees, and a
terminal round trip (create_session → send_keys → wait_for_text → capture_pane) must work through the
gateway. Skipped when tmux is not installed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fixtures import libtmux
from tests.fixtures.mcp_client import all_tools
from tests.gateway.test_relay import Inbox, dump, serve_gateway, upstream_health, wait_listed

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ROUND_TRIP_TOOLS = {"create_session", "send_keys", "wait_for_text", "capture_pane"}
WAIT_S = 9


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
            await libtmux.pane_round_trip(client, "GW", "gateway-roundtrip")
    assert len(expected) >= 40
    assert [dump(tool) for tool in relayed] == [dump(tool) for tool in expected]
    assert up["dropped"] == []
    assert up["renamed"] == []
    assert up["relayed_tools"] == len(expected)
    assert server_info is not None
    assert (up["server_name"], up["server_version"]) == (server_info.name, server_info.version)


async def test_through_the_gateway_libtmux_over_stdio_looks_identical_and_a_pane_round_trip_works(
    tmp_path: Path, tmux_socket: str
) -> None:
    command = libtmux.stdio_command()
    env = libtmux.libtmux_env(tmux_socket)
    conn = {"name": "tmux", "transport": "stdio", "command": command, "env": env, "connect_timeout_s": 30}
    await relay_and_compare(tmp_path, conn, libtmux.stdio_params(tmux_socket))


async def test_through_the_gateway_libtmux_over_http_looks_identical_and_a_pane_round_trip_works(
    tmp_path: Path, libtmux_url: str
) -> None:
    conn = {"name": "tmux", "transport": "http", "url": libtmux_url, "connect_timeout_s": 30}
    await relay_and_compare(tmp_path, conn, libtmux_url)


@pytest.mark.slow
async def test_libtmux_answers_liveness_probes_through_a_long_wait_for_text_and_keeps_the_call(
    tmp_path: Path, tmux_socket: str
) -> None:
    command = libtmux.stdio_command()
    env = libtmux.libtmux_env(tmux_socket)
    conn = {
        "name": "tmux",
        "transport": "stdio",
        "command": command,
        "env": env,
        "connect_timeout_s": 30,
        "keepalive_interval_s": 0.5,
        # The wait below lasts three times as long. libtmux-mcp answers the probes while it polls the pane
        # (tmux subprocesses); 1.5 s of silence was little margin for both processes on a loaded machine.
        "liveness_timeout_s": 3.0,
    }
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[{"connection": conn}]) as (client, _):
        with anyio.fail_after(45):
            await wait_listed(client, inbox, ROUND_TRIP_TOOLS)
            created = await client.call_tool("create_session", {"session_name": "long-wait"})
            assert isinstance(created.structured_content, dict)
            pane_id = created.structured_content["active_pane_id"]
            waited = await client.call_tool(
                "wait_for_text", {"patterns": ["never-printed-5e0c"], "pane_id": pane_id, "timeout": WAIT_S}
            )
            up = await upstream_health(client, "tmux")
    assert waited.is_error is not True, libtmux.text_of(waited)
    assert isinstance(waited.structured_content, dict)
    assert waited.structured_content["outcome"] == "timeout"
    assert waited.structured_content["elapsed_seconds"] >= WAIT_S
    assert up["connect_attempts"] == 1  # never declared lost during the wait
    assert up["ambiguous_losses"] == 0
