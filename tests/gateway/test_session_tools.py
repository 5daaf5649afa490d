"""The session tools through MCP against the real sshd: schemas and toolsets, ensure → send → wait_for →
read → list → close, error codes, the sessions section of gateway_health, a session that survives
``kill -9`` of the gateway subprocess with its scrollback, a sent secret that reaches neither the audit log
nor the logs, and the official TypeScript client (MCP Inspector CLI) seeing a success and a failure."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from remoteops import StateStore
from remoteops.sessions.manager import SESSIONS, session_key
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ensure_tool
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory
from tests.remoteops.session_helpers import exit_masters, session_root, tmux_sessions

pytestmark = [pytest.mark.sshd, pytest.mark.anyio]

PROMPT = "rog-tools> "
NAMES = (
    "session_ensure",
    "session_send",
    "session_read",
    "session_wait_for",
    "session_list",
    "session_close",
)


@pytest.fixture
def root() -> Iterator[Path]:
    with session_root() as path:
        yield path


@pytest.fixture
def control() -> Iterator[Path]:
    """A master directory of this test's gateways only (short: ControlPath); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rogsc-", dir="/tmp"))
    try:
        yield path
    finally:
        exit_masters(path)
        shutil.rmtree(path, ignore_errors=True)


def _config(sshd: SshdInstance, root: Path, control_dir: Path | None = None) -> dict[str, Any]:
    control = control_dir or sshd.control_dir
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(control)},
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "sessions": {"remote_dir": str(root), "width": 100, "height": 30},
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error is True, result
    assert result.structured_content is None
    return dict(result.meta["remoteops-gateway/error"])


def ok(result: Any) -> dict[str, Any]:
    assert result.is_error is not True, result
    return dict(result.structured_content)


async def test_session_tools_are_listed_with_schemas_in_their_toolsets(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path
) -> None:
    config = _config(sshd, root)
    config["tools"] = {"toolsets": ["inspect", "execute"]}
    async with gateway_client(**config) as (client, rt):
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in NAMES[:-1]:
        jsonschema.Draft202012Validator.check_schema(tools[name].input_schema)
        assert tools[name].input_schema.get("additionalProperties") is False
    assert "session_close" not in tools  # teardown is not enabled here
    assert "session_close" in rt.catalog.filtered_out
    assert tools["session_read"].annotations.read_only_hint is True
    assert tools["session_wait_for"].annotations.read_only_hint is True
    assert tools["session_send"].annotations.read_only_hint is False
    keys = tools["session_send"].input_schema["properties"]["keys"]["items"]["enum"]
    assert {"Enter", "Tab", "Escape", "Up", "C-c", "C-d", "C-z"} <= set(keys)


async def test_ensure_send_wait_read_list_and_close_through_mcp(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path
) -> None:
    async with gateway_client(**_config(sshd, root)) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        with anyio.fail_after(90):
            made = ok(await client.call_tool("session_ensure", {"target": "plain", "name": "ops"}))
            again = ok(await client.call_tool("session_ensure", {"target": "plain", "name": "ops"}))
            sent = ok(await client.call_tool(
                "session_send", {"target": "plain", "name": "ops", "text": f"PS1='{PROMPT}'", "enter": True}
            ))  # fmt: skip
            waited = ok(await client.call_tool("session_wait_for", {
                "target": "plain", "name": "ops", "pattern": "^rog-tools> $", "since": sent["cursor_before"]
            }))  # fmt: skip
            stream = ok(
                await client.call_tool("session_read", {"target": "plain", "name": "ops", "max_bytes": 8})
            )
            rest = ok(await client.call_tool(
                "session_read", {"target": "plain", "name": "ops", "since": stream["next_offset"]}
            ))  # fmt: skip
            screen = ok(
                await client.call_tool("session_read", {"target": "plain", "name": "ops", "view": "screen"})
            )
            listed = ok(await client.call_tool("session_list", {"target": "plain"}))
            health = ok(await client.call_tool("gateway_health", {}))
            closed = ok(await client.call_tool("session_close", {"target": "plain", "name": "ops"}))
            after = ok(await client.call_tool("gateway_health", {}))
    outputs = {"session_ensure": made, "session_send": sent, "session_wait_for": waited}
    outputs |= {"session_read": rest, "session_list": listed, "session_close": closed}
    for name, out in outputs.items():
        jsonschema.validate(out, tools[name].output_schema)
    assert (made["outcome"], again["outcome"]) == ("created", "reattached")
    assert waited["outcome"] == "matched"
    assert stream["offset"] == 0
    assert rest["offset"] == stream["next_offset"]
    assert PROMPT in stream["data"] + rest["data"]
    assert (screen["width"], screen["height"]) == (100, 30)
    assert PROMPT.strip() in screen["data"]
    assert [s["name"] for s in listed["sessions"]] == ["ops"]
    assert health["sessions"]["by_state"] == {"alive": 1}
    assert (health["sessions"]["width"], health["sessions"]["height"]) == (100, 30)
    assert closed["outcome"] == "killed"
    assert after["sessions"]["total"] == 0
    assert tmux_sessions(root) == []


async def test_session_errors_have_codes(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path
) -> None:
    async with gateway_client(**_config(sshd, root)) as (client, _):
        with anyio.fail_after(60):
            unknown = await client.call_tool("session_send", {"target": "plain", "name": "nope", "text": "x"})
            bad_name = await client.call_tool("session_ensure", {"target": "plain", "name": "../x"})
            bad_key = await client.call_tool(
                "session_send", {"target": "plain", "name": "nope", "keys": ["rm -rf /"]}
            )
            elsewhere = await client.call_tool("session_ensure", {"target": "nowhere", "name": "ops"})
            ok(await client.call_tool("session_ensure", {"target": "plain", "name": "ops"}))
            empty = await client.call_tool("session_send", {"target": "plain", "name": "ops"})
            too_long = await client.call_tool(
                "session_wait_for", {"target": "plain", "name": "ops", "pattern": "x", "timeout_s": 10**6}
            )
            ok(await client.call_tool("session_send", {"target": "plain", "name": "ops", "text": "exit\n"}))
            ended = ok(await client.call_tool(
                "session_wait_for", {"target": "plain", "name": "ops", "pattern": "^never$", "timeout_s": 20}
            ))  # fmt: skip
            exited = await client.call_tool("session_send", {"target": "plain", "name": "ops", "text": "x"})
    assert error_of(unknown)["code"] == "not_found"
    assert error_of(unknown)["details"]["use"] == "session_ensure"  # the way out
    assert error_of(bad_name)["code"] == "validation_error"
    assert error_of(bad_key)["code"] == "validation_error"
    assert error_of(elsewhere)["code"] == "policy_denied"
    assert error_of(empty)["code"] == "validation_error"
    assert error_of(too_long)["code"] == "validation_error"
    assert ended["outcome"] == "session_exited"
    assert (error_of(exited)["code"], error_of(exited)["details"]["state"]) == ("conflict", "exited")


async def _call(gw: GatewayProcess, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy", cache=None) as c:
        return ok(await c.call_tool(name, arguments))


def _inspector_call(
    inspector: InstalledTool, gw: GatewayProcess, home: Path, tool: str, *tool_args: str
) -> dict[str, Any]:
    """One tools/call by the MCP Inspector CLI (the official TypeScript client); its result."""
    argv = ["--cli", gw.url, "--transport", "http", "--method", "tools/call", "--tool-name", tool]
    argv += [a for pair in tool_args for a in ("--tool-arg", pair)]
    argv += ["--format", "json", "--stored-auth-only", "--header", f"Authorization: Bearer {gw.token}"]
    run = inspector.run(argv, timeout_s=90, home=home)
    context = f"{run.describe()}\n--- gateway stderr ---\n{gw.stderr_text()[-4000:]}"
    result = json.loads(run.stdout)["result"]
    assert isinstance(result, dict), context
    if result.get("isError"):
        assert "structuredContent" not in result, context
        last = json.loads(run.stderr.strip().splitlines()[-1])["error"]
        assert last["code"] == "tool_is_error", context  # the gateway's error, no outputSchema complaint
    else:
        assert run.returncode == 0, context
    return result


@pytest.mark.slow
async def test_a_session_survives_kill_9_of_the_gateway_with_its_scrollback_and_secrets_stay_out_of_logs(
    tmp_path: Path, sshd: SshdInstance, root: Path, control: Path
) -> None:
    config = _config(sshd, root, control)
    secret = "hunter2-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    target = {"target": "plain", "name": "keep"}
    inspector = await anyio.to_thread.run_sync(ensure_tool, INSPECTOR)
    with anyio.fail_after(240):
        with run_gateway(tmp_path, config) as first:
            made = await _call(first, "session_ensure", target)
            sent = await _call(first, "session_send", {**target, "text": f"PS1='{PROMPT}'; echo before-kill"})
            await _call(first, "session_send", {**target, "keys": ["Enter"]})
            await _call(
                first,
                "session_wait_for",
                {**target, "pattern": "^rog-tools> $", "since": sent["cursor_before"]},
            )
            before = await _call(first, "session_read", {**target, "view": "scrollback", "lines": 200})
            first.proc.kill()  # SIGKILL: no shutdown code runs
            await anyio.to_thread.run_sync(first.proc.wait, 30)
        assert first.exit_code == -9
        await anyio.to_thread.run_sync(exit_masters, control)  # what a clean stop would have closed
        await anyio.Path(tmp_path / "ready.json").unlink()
        with run_gateway(tmp_path, config) as second:
            back = await _call(second, "session_ensure", target)
            after = await _call(second, "session_read", {**target, "view": "scrollback", "lines": 200})
            typed = await _call(second, "session_send", {**target, "text": "read -r pw; echo got-${#pw}"})
            await _call(second, "session_send", {**target, "keys": ["Enter"]})
            await _call(second, "session_send", {**target, "text": secret, "enter": True})
            got = await _call(second, "session_wait_for", {
                **target, "pattern": "^got-[0-9]+$", "since": typed["cursor_before"]
            })  # fmt: skip
            listed = await anyio.to_thread.run_sync(
                _inspector_call, inspector, second, tmp_path, "session_list", "target=plain"
            )
            failed = await anyio.to_thread.run_sync(
                _inspector_call,
                inspector,
                second,
                tmp_path,
                "session_send",
                "target=plain",
                "name=nope",
                "text=x",
            )
            health = await _call(second, "gateway_health", {})
            stderr = second.stderr_text() + first.stderr_text()
    assert (made["outcome"], back["outcome"], back["adopted"]) == ("created", "reattached", False)
    assert back["tmux_session"] == made["tmux_session"]
    assert "before-kill" in after["data"]
    assert after["data"] == before["data"]  # the same scrollback: nothing was recreated
    assert tmux_sessions(root) == ["keep"]
    assert got["line"] == f"got-{len(secret)}"  # the secret did arrive in the session
    assert [s["name"] for s in listed["structuredContent"]["sessions"]] == ["keep"]
    assert listed["isError"] is False
    error = failed["_meta"]["remoteops-gateway/error"]
    assert error == json.loads(failed["content"][0]["text"])["error"]
    assert error["code"] == "not_found"
    assert health["sessions"]["by_state"] == {"alive": 1}
    # the audit log holds the secret's digest, never the secret; neither do the logs or the state store
    audit = await anyio.Path(tmp_path / "state" / "audit.jsonl").read_text()
    records = [json.loads(line) for line in audit.splitlines()]
    digests = [
        r["arguments"]["text"]
        for r in records
        if r.get("tool") == "session_send" and "text" in r.get("arguments", {})
    ]
    expected = hashlib.sha256(secret.encode()).hexdigest()[:12]
    assert {"len": len(secret), "sha256_prefix": expected} in digests
    assert secret not in audit
    assert secret not in stderr
    for path in (tmp_path / "state").rglob("*"):
        if await anyio.Path(path).is_file():
            assert secret.encode() not in await anyio.Path(path).read_bytes(), path


async def test_a_stale_record_of_another_tmux_session_is_replaced_by_adopting_the_live_one_through_mcp(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path
) -> None:
    args = {"target": "plain", "name": "ops"}
    async with gateway_client(**_config(sshd, root)) as (client, rt):
        with anyio.fail_after(60):
            made = ok(await client.call_tool("session_ensure", args))
        state_dir = rt.settings.state_dir
    store = StateStore(state_dir)
    store.open_sync()
    key = session_key("plain", "ops")
    live = store.get_sync(SESSIONS, key)
    assert live is not None
    stale = live.model_copy(update={"tmux_id": "$" + str(int(live.tmux_id[1:]) + 3)})
    store.put_sync(SESSIONS, key, stale)  # what the state store says no longer names the live session
    async with gateway_client(**_config(sshd, root)) as (client, _):
        with anyio.fail_after(60):
            found = ok(await client.call_tool("session_ensure", args))
            listed = ok(await client.call_tool("session_list", {}))
    assert (found["outcome"], found["adopted"]) == ("reattached", True)
    assert found["tmux_session"] == made["tmux_session"]
    assert [(s["name"], s["state"]) for s in listed["sessions"]] == [("ops", "alive")]
    assert tmux_sessions(root) == ["ops"]
    stored = store.get_sync(SESSIONS, key)
    assert stored is not None
    assert stored.tmux_id == live.tmux_id
