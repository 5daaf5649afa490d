"""libtmux-mcp as a real upstream, over stdio and over streamable HTTP."""

from __future__ import annotations

import shutil
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fixtures import libtmux
from tests.fixtures.mcp_client import all_tools
from tests.upstream.test_passthrough import dump
from upstream import Upstream, UpstreamSettings

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


async def compare_and_round_trip(settings: UpstreamSettings, direct: Any) -> None:
    with anyio.fail_after(120):  # two libtmux-mcp start-ups (~3 s each here, 6+ s on a loaded machine)
        async with Client(direct, mode="legacy", cache=None) as client:
            expected = await all_tools(client)
        async with Upstream(settings) as up:
            relayed = await up.list_tools()
            assert len(relayed) >= 40
            assert dump(relayed) == dump(expected)
            await libtmux.pane_round_trip(up, "RT", "roundtrip")
            health = up.health()
    assert health.server_name is not None
    assert health.tool_count == len(expected)


async def test_libtmux_over_stdio_tools_are_identical_and_a_pane_round_trip_works(tmux_socket: str) -> None:
    command = libtmux.stdio_command()
    env = libtmux.libtmux_env(tmux_socket)
    settings = UpstreamSettings(
        name="tmux", transport="stdio", command=command, env=env, connect_timeout_s=60, call_wait_s=60
    )
    await compare_and_round_trip(settings, libtmux.stdio_params(tmux_socket))


async def test_libtmux_over_http_tools_are_identical_and_a_pane_round_trip_works(libtmux_url: str) -> None:
    settings = UpstreamSettings(
        name="tmux", transport="http", url=libtmux_url, connect_timeout_s=60, call_wait_s=60
    )
    await compare_and_round_trip(settings, libtmux_url)
