"""The real gateway over stdio (a subprocess): MCP works, and stdout carries nothing but protocol."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.fixtures.gateway_proc import write_config


@pytest.mark.anyio
async def test_an_mcp_client_lists_and_calls_tools_over_stdio(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "g.toml", {"state_dir": str(tmp_path / "state")})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway.cli", "--config", str(cfg), "serve", "--stdio"]
    )
    async with Client(params, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "gateway_health" in names
        result = await client.call_tool("gateway_health", {})
        assert result.is_error is not True
        assert result.structured_content is not None
        assert result.structured_content["audit"]["healthy"] is True


def test_stdout_carries_only_json_rpc(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "g.toml", {"state_dir": str(tmp_path / "state"), "log_level": "debug"})
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "gateway_health", "arguments": {}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
    ]
    stdin = "".join(json.dumps(m) + "\n" for m in messages)
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--config", str(cfg), "serve", "--stdio"],
        input=stdin.encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    lines = proc.stdout.decode().splitlines()
    parsed = [json.loads(line) for line in lines]  # every stdout line is JSON
    assert all(m.get("jsonrpc") == "2.0" for m in parsed)
    ids = {m.get("id") for m in parsed if "id" in m}
    assert {1, 2, 3, 4} <= ids
