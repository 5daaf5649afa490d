"""The per-call decision and the declaration check of MCP tasks, the store's principal binding and expiry
with an injected clock, and ``mcp_tasks.enabled`` on an in-memory server (no network, no processes)."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client

from acceptance.harness.mcp_tasks import CreatedTask, TasksExtension, poll
from gateway._runtime import Runtime
from gateway.config import McpTaskSettings, Settings
from gateway.mcptasks import EXTENSION_ID, McpTaskNotFound, McpTaskRecord, declares_extension, wants_task
from gateway.mcptasks.negotiate import CLIENT_CAPABILITIES_META, may_run_as_task
from gateway.mcptasks.store import McpTaskStore, new_task_id
from gateway.serving.server import build_server
from gateway.tools import all_specs
from remoteops import StateStore

pytestmark = pytest.mark.anyio


def _declared(extensions: object) -> dict[str, object]:
    return {"name": "x", "_meta": {CLIENT_CAPABILITIES_META: {"extensions": extensions}}}


def test_only_a_request_that_declares_the_extension_in_its_own_meta_counts_as_declaring() -> None:
    assert declares_extension(_declared({EXTENSION_ID: {}}))
    assert not declares_extension(_declared({"io.modelcontextprotocol/ui": {}}))
    assert not declares_extension(_declared({EXTENSION_ID: True}))
    assert not declares_extension({"name": "x"})
    assert not declares_extension(None)


def test_always_tools_and_long_timeouts_become_tasks_and_nothing_else_does() -> None:
    s = McpTaskSettings(threshold_s=60)
    assert wants_task(s, "exec_many", {})  # a name of a tool that may not exist yet is fine
    assert wants_task(s, "remote_upload", {})
    assert wants_task(s, "remote_exec", {"timeout_s": 60})
    assert wants_task(s, "remote_exec", {"timeout_s": 1800.5})
    assert not wants_task(s, "remote_exec", {"timeout_s": 59.9})
    assert not wants_task(s, "remote_exec", {})
    assert not wants_task(s, "remote_exec", {"timeout_s": True})
    assert not wants_task(s, "remote_read", {"timeout_s": 600})
    assert not wants_task(McpTaskSettings(enabled=False), "exec_many", {})
    assert may_run_as_task(s, "remote_exec")
    assert not may_run_as_task(s, "remote_read")


def _record(task_id: str, principal: str, created: float, status: str = "working") -> McpTaskRecord:
    return McpTaskRecord.model_validate(
        {
            "id": task_id,
            "principal": principal,
            "generation": "v2",
            "tool": "remote_exec",
            "status": status,
            "created_at": created,
            "updated_at": created,
            "ttl_ms": 60_000,
            "poll_interval_ms": 1000,
            "durable": True,
        }
    )


async def test_a_task_is_found_only_by_its_principal_and_expires_after_its_ttl(tmp_path: Path) -> None:
    now = [1000.0]
    store = McpTaskStore(StateStore(tmp_path / "state"), clock=lambda: now[0])
    await store.load()
    task_id = new_task_id()
    await store.save(_record(task_id, "oauth:alice", now[0], status="completed"))
    assert store.find(task_id, "oauth:alice").id == task_id
    with pytest.raises(McpTaskNotFound):
        store.find(task_id, "oauth:bob")
    stored = tmp_path / "state" / "mcp_tasks" / f"{task_id}.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    now[0] += 61  # past the ttl
    with pytest.raises(McpTaskNotFound):
        store.find(task_id, "oauth:alice")
    assert await store.purge_expired() == [task_id]
    assert not stored.exists()
    again = McpTaskStore(StateStore(tmp_path / "state"), clock=lambda: now[0])
    assert await again.load() == []


@pytest.mark.parametrize("enabled", [True, False])
async def test_mcp_tasks_off_advertises_nothing_and_answers_every_call_as_before(
    tmp_path: Path, enabled: bool
) -> None:
    cfg = Settings.model_validate({"state_dir": str(tmp_path / "state"), "mcp_tasks": {"enabled": enabled}})
    async with Runtime(cfg, all_specs()) as rt:
        server = build_server(rt, stdio_principal="test")
        with anyio.fail_after(30):
            async with Client(server, extensions=[TasksExtension()]) as client:
                advertised = client.server_capabilities
                answer = await client.session.call_tool(
                    "task_wait", {"task_id": "t-" + "0" * 16}, allow_claimed=True
                )
                done = await poll(client, answer.task_id) if isinstance(answer, CreatedTask) else None
    assert advertised is not None
    assert (EXTENSION_ID in (advertised.extensions or {})) is enabled
    if enabled:  # task_wait is always a task; the tool's error is a completed task's isError result
        assert done is not None
        assert done["status"] == "completed"
        assert done["result"]["_meta"]["remoteops-gateway/error"]["code"] == "not_found"
    else:
        assert isinstance(answer, types.CallToolResult)
        assert answer.is_error is True
