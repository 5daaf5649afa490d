"""Relayed calls reuse the HTTP keep-alive connection to the upstream instead of opening one per call."""

from __future__ import annotations

import subprocess

import anyio
import pytest

from tests.upstream.conftest import FaultServer
from upstream import Upstream, UpstreamSettings

pytestmark = pytest.mark.anyio


def _connections_to(port: int) -> int:
    """TCP connections to ``port`` in any state, TIME-WAIT included (closed ones linger there ~60 s)."""
    out = subprocess.run(
        ["ss", "-Htan", "dst", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=10, check=True
    ).stdout
    return len([line for line in out.splitlines() if line.strip()])


async def test_twenty_relayed_calls_do_not_open_twenty_connections(fault_http: FaultServer) -> None:
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(30):
            await up.wait_for(lambda h: h.state == "connected")
            before = _connections_to(fault_http.port)
            for i in range(20):
                result = await up.call_tool("echo", {"text": str(i)})
                assert result.structured_content == {"text": str(i)}
            opened = _connections_to(fault_http.port) - before
    assert opened <= 3, f"{opened} new connections for 20 calls: keep-alive is not reused"


async def test_relayed_calls_to_a_fastmcp_upstream_reuse_connections(libtmux_url: str) -> None:
    # fastmcp answers tools/call on an SSE stream; the SDK client closes it right after the answer event.
    port = int(libtmux_url.rsplit(":", 1)[1].split("/", 1)[0])
    settings = UpstreamSettings(name="tmux", transport="http", url=libtmux_url)
    async with Upstream(settings) as up:
        with anyio.fail_after(60):
            await up.wait_for(lambda h: h.state == "connected")
            before = _connections_to(port)
            for _ in range(20):
                result = await up.call_tool("list_sessions", {})
                assert result.is_error is not True
            opened = _connections_to(port) - before
    assert opened <= 3, f"{opened} new connections for 20 calls: keep-alive is not reused"


async def test_a_connection_idle_past_the_keepalive_expiry_is_not_reused(
    fault_http: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client drops an idle connection before the server would (uvicorn and Node close theirs after 5 s):
    # a request sent while the server closes the connection fails after it was sent, which is ambiguous.
    import upstream._transport as transport

    assert transport._KEEPALIVE_EXPIRY_S < 5.0
    monkeypatch.setattr(transport, "_KEEPALIVE_EXPIRY_S", 0.3)
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(30):
            await up.wait_for(lambda h: h.state == "connected")
            await up.call_tool("echo", {"text": "warm"})
            before = _connections_to(fault_http.port)
            await anyio.sleep(0.6)  # past the (shortened) expiry
            result = await up.call_tool("echo", {"text": "after the idle gap"})
            opened = _connections_to(fault_http.port) - before
    assert result.structured_content == {"text": "after the idle gap"}
    assert opened >= 1, "the idle connection was reused past the keep-alive expiry"
