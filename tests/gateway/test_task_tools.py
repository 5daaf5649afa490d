"""The task tools through MCP against the real sshd: schemas and toolsets, start → wait (with progress) →
output → list → cancel, error codes, gateway_health sections, and a task that survives ``kill -9`` of the
gateway subprocess."""

from __future__ import annotations

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

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory
from tests.remoteops.task_helpers import Gate, remote_root, tmux_sessions

pytestmark = [pytest.mark.sshd, pytest.mark.anyio]


@pytest.fixture
def root() -> Iterator[Path]:
    with remote_root() as path:
        yield path


@pytest.fixture
def gate(shared_dir: Path) -> Iterator[Gate]:
    g = Gate(shared_dir, "gate")
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A short directory the target's user can write to (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogg-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _config(sshd: SshdInstance, root: Path, **tasks: Any) -> dict[str, Any]:
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "tasks": {"remote_dir": str(root), **tasks},
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }


def error_of(result: Any) -> dict[str, Any]:
    """The structured error, wherever this gateway version puts it (structuredContent, _meta or JSON text)."""
    assert result.is_error is True, result
    if result.structured_content and "error" in result.structured_content:
        return dict(result.structured_content["error"])
    meta = getattr(result, "meta", None) or {}
    if "remoteops-gateway/error" in meta:
        return dict(meta["remoteops-gateway/error"])
    return dict(json.loads(result.content[0].text)["error"])


def ok(result: Any) -> dict[str, Any]:
    assert result.is_error is not True, result
    return dict(result.structured_content)


async def test_task_tools_are_listed_with_schemas_in_their_toolsets(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path
) -> None:
    config = _config(sshd, root)
    config["tools"] = {"toolsets": ["inspect", "execute"]}
    async with gateway_client(**config) as (client, rt):
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("task_start", "task_status", "task_output", "task_wait", "task_list"):
        assert name in tools
        jsonschema.Draft202012Validator.check_schema(tools[name].input_schema)
        assert tools[name].input_schema.get("additionalProperties") is False
    assert "task_cancel" not in tools  # teardown is not enabled here
    assert "task_cancel" in rt.catalog.filtered_out
    assert tools["task_status"].annotations.read_only_hint is True
    assert tools["task_start"].annotations.destructive_hint is True


@pytest.mark.parametrize("carrier", ["auto", "ssh"])  # auto is the agent on this target
async def test_start_wait_with_progress_output_list_and_cancel_through_mcp(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path, gate: Gate, carrier: str
) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        if progress >= 4:  # the wait is under way and has seen "one\n": let the task print more and finish
            gate.release()

    config = _config(sshd, root, progress_interval_s=0.2, wait_segment_s=1)
    config["transport"]["carrier"] = carrier
    async with gateway_client(**config) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        with anyio.fail_after(90):
            started = ok(await client.call_tool(
                "task_start", {"target": "plain", "shell": f"echo one; {gate.shell()}; echo two; exit 3"}
            ))  # fmt: skip
            jsonschema.validate(started, tools["task_start"].output_schema)
            task_id = started["id"]
            wait_args = {"task_id": task_id, "timeout_s": 60}
            waited = ok(await client.call_tool("task_wait", wait_args, progress_callback=on_progress))
            jsonschema.validate(waited, tools["task_wait"].output_schema)
            out = ok(await client.call_tool("task_output", {"task_id": task_id, "max_bytes": 4}))
            rest = ok(
                await client.call_tool("task_output", {"task_id": task_id, "since": out["next_offset"]})
            )
            jsonschema.validate(rest, tools["task_output"].output_schema)
            status = ok(await client.call_tool("task_status", {"task_id": task_id}))
            listed = ok(await client.call_tool("task_list", {"state": "exited", "target": "plain"}))
            health = ok(await client.call_tool("gateway_health", {}))
            running = ok(await client.call_tool("task_start", {"target": "plain", "argv": ["sleep", "1000"]}))
            cancelled = ok(await client.call_tool("task_cancel", {"task_id": running["id"]}))
    assert (waited["outcome"], waited["exit_code"]) == ("exited", 3)
    # Progress during the wait, with the byte count: a segment that ends before the task printed "one\n"
    # (a loaded machine) reports 0; the task cannot finish before a report of 4 released its gate.
    assert 4.0 in seen, seen
    assert all(size in (0.0, 4.0, 8.0) for size in seen), seen
    assert (out["data"], rest["data"], rest["complete"]) == ("one\n", "two\n", True)
    assert status["state"] == "exited"
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    assert health["tasks"]["by_state"] == {"exited": 1}
    assert health["state"]["problems"] == []
    assert (cancelled["step"], cancelled["state"]) == ("INT", "cancelled")
    used = health["transport"]["carriers"]["plain"]["carrier"]
    assert used == ("ssh" if carrier == "ssh" else "agent")


async def test_task_errors_have_codes(gateway_client: ClientFactory, sshd: SshdInstance, root: Path) -> None:
    async with gateway_client(**_config(sshd, root)) as (client, _):
        with anyio.fail_after(30):
            unknown = await client.call_tool("task_status", {"task_id": "t-0123456789abcdef"})
            malformed = await client.call_tool("task_wait", {"task_id": "../../etc/passwd"})
            both = await client.call_tool(
                "task_start", {"target": "plain", "argv": ["true"], "shell": "true"}
            )
            elsewhere = await client.call_tool("task_start", {"target": "nowhere", "argv": ["true"]})
            nul = await client.call_tool("task_start", {"target": "plain", "argv": ["echo", "a\x00b"]})
            too_long = await client.call_tool(
                "task_wait", {"task_id": "t-0123456789abcdef", "timeout_s": 10**6}
            )
    assert error_of(unknown)["code"] == "not_found"
    assert error_of(malformed)["code"] == "validation_error"
    assert error_of(both)["code"] == "validation_error"
    assert error_of(elsewhere)["code"] == "policy_denied"
    assert (error_of(nul)["code"], error_of(nul)["details"]["field"]) == ("validation_error", "argv[1]")
    assert error_of(too_long)["code"] == "validation_error"
    assert error_of(too_long)["details"]["field"] == "timeout_s"


async def test_a_truncated_state_file_at_startup_is_kept_aside_and_shown_in_health(
    gateway_client: ClientFactory, sshd: SshdInstance, root: Path, tmp_path: Path
) -> None:
    tasks_dir = anyio.Path(tmp_path / "state" / "tasks")
    await tasks_dir.mkdir(parents=True, mode=0o700)
    await (tasks_dir / "t-00000000000000aa.json").write_text('{"kind": "tasks", "version": 1, "rec')
    async with gateway_client(**_config(sshd, root)) as (client, _):
        health = ok(await client.call_tool("gateway_health", {}))
        listed = ok(await client.call_tool("task_list", {}))
    [problem] = health["state"]["problems"]
    assert (problem["record_id"], problem["reason"]) == ("t-00000000000000aa", "not_json")
    assert await anyio.Path(problem["moved_to"]).exists()
    assert listed["total"] == 0


async def _call(gw: GatewayProcess, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy", cache=None) as c:
        return ok(await c.call_tool(name, arguments))


@pytest.mark.slow
@pytest.mark.parametrize("session", ["tmux", "setsid"])
async def test_a_task_survives_kill_9_of_the_gateway_and_completes_under_the_same_id(
    tmp_path: Path, sshd: SshdInstance, root: Path, gate: Gate, session: str
) -> None:
    count = gate.path.with_name("count")
    config = _config(sshd, root, session=session)
    script = f"echo ran >> {count}; echo waiting; {gate.shell()}; echo finished; exit 42"
    with anyio.fail_after(120):
        with run_gateway(tmp_path, config) as first:
            started = await _call(first, "task_start", {"target": "plain", "shell": script})
            await _call(first, "task_wait", {"task_id": started["id"], "pattern": "waiting", "since": 0})
            first.proc.kill()  # SIGKILL: no shutdown code runs
            await anyio.to_thread.run_sync(first.proc.wait, 30)
        assert first.exit_code == -9
        await anyio.Path(tmp_path / "ready.json").unlink()
        with run_gateway(tmp_path, config) as second:
            status = await _call(second, "task_status", {"task_id": started["id"]})
            sessions_before = tmux_sessions(root)
            gate.release()
            done = await _call(second, "task_wait", {"task_id": started["id"], "timeout_s": 60})
            out = await _call(second, "task_output", {"task_id": started["id"]})
            health = await _call(second, "gateway_health", {})
    assert status["state"] == "running"
    assert (done["outcome"], done["exit_code"]) == ("exited", 42)
    assert out["data"] == "waiting\nfinished\n"
    assert await anyio.Path(count).read_text() == "ran\n"  # the command ran exactly once
    if session == "tmux":
        assert sessions_before == [started["id"]]  # one session, the recorded one
    assert status["session"] == started["session"]
    assert health["tasks"]["by_state"] == {"exited": 1}
