"""libtmux-mcp as a real upstream, over stdio and over streamable HTTP."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.upstream.conftest import free_port, stop_process, wait_for_port
from tests.upstream.test_passthrough import direct_tools, dump
from upstream import Upstream, UpstreamSettings

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

BIN = Path(sys.executable).parent


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    name = f"up-test-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, check=False, timeout=10)
        tmpdir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (tmpdir / name).unlink(missing_ok=True)


def libtmux_env(socket: str) -> dict[str, str]:
    return {"LIBTMUX_SOCKET": socket, "FASTMCP_SHOW_SERVER_BANNER": "false"}


def spawn_libtmux_http(socket: str, port: int) -> subprocess.Popen[bytes]:
    import libtmux_mcp

    server_py = Path(libtmux_mcp.__file__).parent / "server.py"
    argv = [str(BIN / "fastmcp"), "run", f"{server_py}:build_mcp_server", "--transport", "http"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--no-banner"]
    env = {**os.environ, **libtmux_env(socket)}
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


@pytest.fixture
async def libtmux_http(tmux_socket: str) -> AsyncIterator[str]:
    port = free_port()
    proc = spawn_libtmux_http(tmux_socket, port)
    try:
        await wait_for_port(port, proc, ceiling_s=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(proc)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def round_trip(up: Upstream) -> None:
    marker = f"RT-{uuid.uuid4().hex[:8]}"
    created = await up.call_tool("create_session", {"session_name": "roundtrip"})
    assert created.is_error is not True, text_of(created)
    assert isinstance(created.structured_content, dict)
    pane_id = created.structured_content["active_pane_id"]
    sent = await up.call_tool("send_keys", {"keys": f"echo {marker}-$((6*7))", "pane_id": pane_id})
    assert sent.is_error is not True, text_of(sent)
    waited = await up.call_tool("wait_for_text", {"patterns": [f"{marker}-42"], "pane_id": pane_id})
    assert waited.is_error is not True, text_of(waited)
    captured = await up.call_tool("capture_pane", {"pane_id": pane_id})
    assert f"{marker}-42" in text_of(captured)


async def compare_and_round_trip(settings: UpstreamSettings, direct: Any) -> None:
    with anyio.fail_after(45):
        async with Client(direct, mode="legacy", cache=None) as client:
            expected = await direct_tools(client)
        async with Upstream(settings) as up:
            relayed = await up.list_tools()
            assert len(relayed) >= 40
            assert dump(relayed) == dump(expected)
            await round_trip(up)
            health = up.health()
    assert health.server_name is not None
    assert health.tool_count == len(expected)


async def test_libtmux_over_stdio_tools_are_identical_and_a_pane_round_trip_works(tmux_socket: str) -> None:
    command = [str(BIN / "libtmux-mcp")]
    env = libtmux_env(tmux_socket)
    settings = UpstreamSettings(
        name="tmux", transport="stdio", command=command, env=env, connect_timeout_s=30
    )
    direct = StdioServerParameters(command=command[0], env=env)
    await compare_and_round_trip(settings, direct)


async def test_libtmux_over_http_tools_are_identical_and_a_pane_round_trip_works(libtmux_http: str) -> None:
    settings = UpstreamSettings(name="tmux", transport="http", url=libtmux_http, connect_timeout_s=30)
    await compare_and_round_trip(settings, libtmux_http)
