"""The real gateway over stdio (a subprocess): MCP works, and stdout carries nothing but protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.fixtures.gateway_proc import write_config


@pytest.mark.slow  # spawns the gateway over stdio
@pytest.mark.anyio
async def test_an_mcp_client_lists_and_calls_tools_over_stdio(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "g.toml", {"state_dir": str(tmp_path / "state")})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(cfg), "serve", "--stdio"]
    )
    async with Client(params, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "gateway_health" in names
        result = await client.call_tool("gateway_health", {})
        assert result.is_error is not True
        assert result.structured_content is not None
        assert result.structured_content["audit"]["healthy"] is True
        # a tool of a toolset that is off (teardown, by default) says so instead of "Unknown tool"
        denied = await client.call_tool("forward_close", {"id": "f1"})
        assert denied.is_error is True
        error = (denied.meta or {})["remoteops-gateway/error"]
        assert error["code"] == "policy_denied"
        assert error["details"]["toolset"] == "teardown"


@pytest.mark.slow  # spawns the gateway over stdio
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(cfg), "serve", "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    deadline = threading.Timer(60, proc.kill)  # the ceiling on every blocking read below
    deadline.start()
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
        proc.stdin.flush()
        parsed = []
        answered: set[int] = set()
        while not {1, 2, 3, 4} <= answered:
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-2000:] if proc.stderr else "stdout closed"
            message = json.loads(line)  # every stdout line is one JSON-RPC message
            assert message.get("jsonrpc") == "2.0"
            parsed.append(message)
            if "id" in message:
                answered.add(message["id"])
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == b""  # nothing after the protocol either
    finally:
        deadline.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    errors = {m["id"]: m["error"]["code"] for m in parsed if "error" in m}
    assert errors == {4: -32602}


@pytest.mark.slow  # spawns the gateway over stdio
def test_unparseable_request_lines_are_answered_logged_and_serving_goes_on(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "g.toml", {"state_dir": str(tmp_path / "state")})
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    deep = '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":' + "[" * 100_000 + "]" * 100_000 + "}}"
    surrogate = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x\\ud800"}}'
    lines = [
        json.dumps(init),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        deep,  # nesting beyond the parser's limit
        surrogate,  # a lone surrogate escape
        "this is not json",  # no id to recover
        json.dumps({"jsonrpc": "2.0", "id": 4}),  # JSON, but no JSON-RPC message
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),  # still serving
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(cfg), "serve", "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    deadline = threading.Timer(60, proc.kill)  # the ceiling on every blocking read below
    deadline.start()
    replies: list[dict[str, object]] = []
    try:
        proc.stdin.write("".join(line + "\n" for line in lines).encode())
        proc.stdin.flush()
        while len(replies) < 6:  # ids 1-5 and the one without an id
            line = proc.stdout.readline()
            assert line, "stdout closed before every request was answered"
            replies.append(json.loads(line))
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        stderr = proc.stderr.read().decode(errors="replace")
    finally:
        deadline.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    errors = {reply["id"]: reply["error"]["code"] for reply in replies if "error" in reply}  # type: ignore[index]
    assert errors == {2: -32700, 3: -32700, None: -32700, 4: -32600}
    listed = next(reply for reply in replies if reply.get("id") == 5)
    assert "tools" in listed["result"]  # type: ignore[operator]
    assert stderr.count("unparseable_request") == 4
    assert "not json" not in stderr  # the line itself is never logged
