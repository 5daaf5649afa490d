"""libtmux-mcp as a real upstream, over stdio and over streamable HTTP."""

from __future__ import annotations

import re
import shutil
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fixtures import libtmux
from tests.fixtures.mcp_client import all_tools
from tests.upstream.test_passthrough import dump
from upstream import StderrLine, Upstream, UpstreamSettings

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


async def test_libtmux_over_stdio_with_its_banner_logs_one_record_per_request_and_no_blank_ones(
    tmux_socket: str,
) -> None:
    # The README's configuration: only LIBTMUX_SOCKET, so FastMCP prints its boxed banner and wraps each
    # request's log line over two lines (26 stderr lines, 4 of them empty, for a connect and two requests).
    env = {**libtmux.libtmux_env(tmux_socket), "FASTMCP_SHOW_SERVER_BANNER": "true"}
    settings = UpstreamSettings(
        name="tmux", transport="stdio", command=libtmux.stdio_command(), env=env, connect_timeout_s=60
    )
    got: list[StderrLine] = []

    def seen(word: str) -> int:
        return sum(word in line.text for line in got)

    async with Upstream(settings, on_stderr=got.append) as up:
        with anyio.fail_after(60):
            await up.wait_for(lambda h: h.state == "connected")
            for _ in range(2):
                await up.call_tool("list_sessions", {})
            while seen("tools/list") < 1 or seen("tools/call") < 2:  # noqa: ASYNC110 - the pipe, read by a task
                await anyio.sleep(0.02)
    texts = [line.text for line in got]
    assert all(text.strip() for text in texts)  # no empty records
    [banner] = [line for line in got if "FastMCP" in line.text]
    assert banner.lines > 10, texts  # the box is one record
    # initialize, tools/list, two tools/call: each wrapped line joined to its request (requests logged in the
    # same second and read together may share a record: rich indents the repeated time column)
    assert sum(text.count("INFO     Request ") for text in texts) == 4, texts
    assert not any(re.fullmatch(r"\s*[0-9.]+ms\s*", text) for text in texts), texts  # no tail on its own
    assert len(got) <= 7, texts
