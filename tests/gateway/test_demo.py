"""``remoteops-gateway demo``: the embedded target driven through the system's OpenSSH, HTTP and stdio."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway, write_config

pytestmark = pytest.mark.slow  # every test runs the demo as a subprocess


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # The demo's control sockets live under the state directory's short fallback; keep paths short anyway.
    path = Path(tempfile.mkdtemp(prefix="rogd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _exercise(client: Client) -> None:
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"remote_exec", "target_list", "gateway_health"} <= names
    assert client.instructions is not None
    assert "demo" in client.instructions
    result = await client.call_tool(
        "remote_exec", {"target": "demo", "argv": ["sh", "-c", "echo hi; exit 7"]}
    )
    assert result.structured_content is not None
    assert result.structured_content["exit_code"] == 7
    assert result.structured_content["stdout"] == "hi\n"
    assert result.structured_content["multiplexed"] is True
    # Large output: head and tail kept within the per-stream cap (64 KiB by default), the rest counted.
    big = await client.call_tool(
        "remote_exec", {"target": "demo", "argv": ["sh", "-c", "yes | head -c 300000"]}
    )
    out = big.structured_content
    assert out is not None
    assert out["stdout_truncated"] is True
    kept = len(out["stdout"].encode())
    assert kept <= 64 * 1024
    assert out["stdout_dropped_bytes"] >= 300000 - kept
    assert out["stdout"].startswith("y\ny\n")


def _demo_process(workdir: Path) -> AbstractContextManager[GatewayProcess]:
    """``demo`` over HTTP; on leaving, ``exit_code`` says how it ended after SIGTERM (the tests want 0)."""
    return run_gateway(workdir, command=("demo",), startup_timeout_s=60, stop_timeout_s=30)


@pytest.mark.anyio
async def test_demo_over_http_prints_url_and_token_and_runs_commands_on_the_embedded_target(
    short_dir: Path,
) -> None:
    with _demo_process(short_dir) as gw:
        assert gw.url in gw.banner
        assert gw.token is not None
        assert gw.token in gw.banner  # the demo prints how to authenticate, token included
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
        async with (
            http,
            Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client,
        ):
            await _exercise(client)
    assert gw.exit_code == 0, gw.stderr_text()[-3000:]  # SIGTERM ends the demo cleanly


@pytest.mark.anyio
async def test_demo_over_stdio_serves_the_same_tools(short_dir: Path) -> None:
    cfg = write_config(short_dir / "g.toml", {"state_dir": str(short_dir / "state")})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(cfg), "demo", "--stdio"]
    )
    async with Client(params, mode="legacy") as client:
        await _exercise(client)


@pytest.mark.anyio
async def test_sigterm_drains_an_in_flight_call_and_exits_zero(short_dir: Path) -> None:
    marker = short_dir / "started"
    results: list[dict[str, object]] = []
    with _demo_process(short_dir) as gw:
        assert gw.token is not None
        pid = gw.pid
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
        try:
            # Stateless 2026-07-28 era: no standalone GET stream that would try to reconnect during shutdown.
            transport = streamable_http_client(gw.url, http_client=http)
            async with http, Client(transport, mode="2026-07-28") as client:
                await client.list_tools()  # the client checks results against the listed outputSchema

                async def call() -> None:
                    result = await client.call_tool(
                        "remote_exec",
                        {"target": "demo", "shell": f"touch {marker}; sleep 2; echo finished"},
                    )
                    assert result.structured_content is not None
                    results.append(result.structured_content)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with anyio.fail_after(20):
                        while not marker.exists():  # noqa: ASYNC110 - the remote side signals through a file
                            await anyio.sleep(0.02)
                    os.kill(pid, signal.SIGTERM)  # the gateway stops accepting and drains the running call
        except* httpx2.ConnectError:
            # Closing the client talks to a gateway that has stopped accepting; only that may fail here.
            assert results, "the in-flight call did not complete before the connection failed"
    assert gw.exit_code == 0, gw.stderr_text()[-3000:]
    assert results[0]["exit_code"] == 0
    assert results[0]["stdout"] == "finished\n"
