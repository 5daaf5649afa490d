"""``remoteops-gateway demo``: the embedded target driven through the system's OpenSSH, HTTP and stdio."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.gateway_proc import write_config


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


@contextmanager
def _demo_process(workdir: Path) -> Iterator[tuple[dict[str, str], str, str]]:
    """Start ``demo`` over HTTP; yield (ready info, token, banner); SIGTERM must end it with exit 0."""
    cfg = write_config(workdir / "g.toml", {"state_dir": str(workdir / "state")})
    ready = workdir / "ready.json"
    err_path = workdir / "stderr"
    argv = [
        sys.executable,
        "-m",
        "gateway",
        "--config",
        str(cfg),
        "demo",
        "--port",
        "0",
        "--ready-file",
        str(ready),
    ]
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={k: v for k, v in os.environ.items() if not k.startswith("REMOTEOPS_GATEWAY")},
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        yield info, Path(info["token_file"]).read_text().strip(), err_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise
        assert code == 0, err_path.read_text()[-3000:]


@pytest.mark.anyio
async def test_demo_over_http_prints_url_and_token_and_runs_commands_on_the_embedded_target(
    short_dir: Path,
) -> None:
    with _demo_process(short_dir) as (info, token, banner):
        assert info["url"] in banner
        assert token in banner  # the demo prints how to authenticate, token included
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30))
        async with (
            http,
            Client(streamable_http_client(info["url"], http_client=http), mode="legacy") as client,
        ):
            await _exercise(client)


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
    with _demo_process(short_dir) as (info, token, _):  # on exit: asserts the gateway exits 0
        pid = int(info["pid"])
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30))
        try:
            # Stateless 2026-07-28 era: no standalone GET stream that would try to reconnect during shutdown.
            transport = streamable_http_client(info["url"], http_client=http)
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
    assert results[0]["exit_code"] == 0
    assert results[0]["stdout"] == "finished\n"
