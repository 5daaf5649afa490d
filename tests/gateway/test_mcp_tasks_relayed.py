"""Relayed upstream tasks: an upstream's own MCP tasks passed through the gateway, never invented by it.

Real processes: the fault upstream over streamable HTTP, with ``--tasks`` (its own tasks, in the era each
connection negotiates) or without; the gateway in-process behind a real MCP client. The 2025-11-25 caller
sends the ``task`` param by hand (the SDK validates a ``tools/call`` answer as a ``CallToolResult``); the
2026-07-28 caller is the SDK with :class:`acceptance.harness.mcp_tasks.TasksExtension`. A second principal is
the same in-process server answering for another stdio principal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError

from acceptance.harness.mcp_tasks import CreatedTask, TasksExtension, cancel, get, poll
from gateway._runtime import Runtime
from gateway.auth.policy import Principal
from gateway.config import Settings
from gateway.mcptasks.relayed import RelayedTask, RelayedTaskMap
from gateway.serving.server import GatewayServer, build_server
from gateway.tools import all_specs
from tests.gateway.conftest import read_audit
from tests.upstream.conftest import FAST_BACKOFF, FaultServer, running_fault
from upstream._tasks import send_raw

pytestmark = pytest.mark.anyio

TERMINAL = ("completed", "failed", "cancelled")


@pytest.fixture
async def tasks_fault(tmp_path: Path) -> AsyncIterator[FaultServer]:
    state = tmp_path / "fault"
    state.mkdir()
    async with running_fault(state, "--tasks") as server:
        yield server


@pytest.fixture
async def plain_fault(tmp_path: Path) -> AsyncIterator[FaultServer]:
    state = tmp_path / "plain"
    state.mkdir()
    async with running_fault(state) as server:
        yield server


@asynccontextmanager
async def gateway(
    tmp_path: Path, fault: FaultServer, *, mode: str = "legacy", extension: bool = False
) -> AsyncIterator[tuple[Client, GatewayServer, Runtime]]:
    """The gateway in-process relaying ``fault`` (its leg in ``mode``), and a client on it: legacy
    (2025-11-25), or 2026-07-28 declaring the tasks extension on every request (``extension``)."""
    connection = {"name": "fault", "transport": "http", "url": fault.url, **FAST_BACKOFF, "mode": mode}
    cfg = Settings.model_validate(
        {"state_dir": str(tmp_path / "state"), "upstreams": [{"connection": connection}]}
    )
    async with Runtime(cfg, all_specs()) as rt:
        server = build_server(rt, stdio_principal="alice")
        client = (
            Client(server, extensions=[TasksExtension()])
            if extension
            else Client(server, mode="legacy", cache=None)
        )
        async with client as c:
            yield c, server, rt


async def rpc(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One raw request (the answer's JSON object, unvalidated): how a 2025-11-25 caller sends ``task``."""
    return await send_raw(client.session, method, params, declare=False)


async def until_terminal(client: Client, task_id: str) -> dict[str, Any]:
    while True:
        got = await rpc(client, "tasks/get", {"taskId": task_id})
        if got["status"] in TERMINAL:
            return got
        await anyio.sleep(0.05)


def as_other_principal(server: GatewayServer) -> None:
    server._fallback = Principal.operator("stdio", "mallory")  # the in-process server's caller, swapped


async def test_a_2025_11_25_task_on_a_relayed_tool_is_the_upstreams_own_polled_to_its_result_via_the_gateway(
    tmp_path: Path, tasks_fault: FaultServer
) -> None:
    with anyio.fail_after(60):
        async with gateway(tmp_path, tasks_fault) as (client, _, rt):
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            call = {
                "name": "slow_echo",
                "arguments": {"text": "relayed", "seconds": 0.3},
                "task": {"ttl": 90_000},
            }
            created = await rpc(client, "tools/call", call)
            task_id = created["task"]["taskId"]
            listing = await rpc(client, "tasks/list", {})
            done = await until_terminal(client, task_id)
            result = await rpc(client, "tasks/result", {"taskId": task_id})
            with pytest.raises(MCPError) as late_cancel:
                await rpc(client, "tasks/cancel", {"taskId": task_id})
            health = rt.mcp_tasks.health()
            audit = [json.loads(line) for line in (await read_audit(rt)).splitlines()]
    assert listed["slow_echo"].execution is not None
    assert listed["slow_echo"].execution.task_support == "optional"  # the upstream's tool, untouched
    assert task_id.startswith("ft-")  # the upstream's task id
    assert (created["task"]["status"], created["task"]["ttl"]) == ("working", 90_000)  # ttl passed on
    assert task_id in [t["taskId"] for t in listing["tasks"]]
    assert done["status"] == "completed"
    assert result["structuredContent"] == {"text": "relayed"}
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert late_cancel.value.error.code == types.INVALID_PARAMS  # the upstream's refusal, unchanged
    assert health["total"] == 0  # no gateway task was made
    steps = [(r["event"], r.get("status")) for r in audit if r.get("task_id") == task_id]
    assert steps[0] == ("mcp_task_created", "working")
    assert ("mcp_task_polled", "completed") in steps
    created_record = next(r for r in audit if r.get("event") == "mcp_task_created")
    assert created_record["facts"] == {"upstream": "fault", "relayed": True}
    assert created_record["principal"] == "alice"  # the stdio principal's label
    calls = [r for r in audit if r.get("event") == "tool_call" and r.get("tool") == "slow_echo"]
    assert [c["outcome"] for c in calls] == ["ok"]  # the creating call's own audit record


async def test_a_relayed_task_is_cancelled_at_its_upstream_and_another_principal_finds_no_such_task(
    tmp_path: Path, tasks_fault: FaultServer
) -> None:
    with anyio.fail_after(60):
        async with gateway(tmp_path, tasks_fault) as (client, server, _):
            call = {"name": "slow_echo", "arguments": {"text": "x", "seconds": 600}, "task": {}}
            task_id = (await rpc(client, "tools/call", call))["task"]["taskId"]
            as_other_principal(server)
            codes = []
            for method in ("tasks/get", "tasks/cancel", "tasks/result"):
                with pytest.raises(MCPError) as refused:
                    await rpc(client, method, {"taskId": task_id})
                codes.append(refused.value.error.code)
            others = await rpc(client, "tasks/list", {})
            server._fallback = Principal.operator("stdio", "alice")
            still = await rpc(client, "tasks/get", {"taskId": task_id})
            cancelled = await rpc(client, "tasks/cancel", {"taskId": task_id})
            after = await rpc(client, "tasks/get", {"taskId": task_id})
    assert codes == [types.INVALID_PARAMS] * 3  # "Task not found", as for an unknown id
    assert others == {"tasks": []}
    assert still["status"] == "working"  # the other principal's cancel never reached the upstream
    assert cancelled["status"] == "cancelled"
    assert after["status"] == "cancelled"


async def test_a_task_param_on_a_tool_of_an_upstream_without_tasks_is_an_ordinary_relayed_call(
    tmp_path: Path, plain_fault: FaultServer
) -> None:
    with anyio.fail_after(60):
        async with gateway(tmp_path, plain_fault) as (client, _, rt):
            call = {"name": "echo", "arguments": {"text": "plain"}, "task": {"ttl": 60_000}}
            answer = await rpc(client, "tools/call", call)
            health = rt.mcp_tasks.health()
    assert "task" not in answer  # no task invented: the upstream's own answer, as before
    assert answer["structuredContent"] == {"text": "plain"}
    assert health["total"] == 0


async def test_a_2026_07_28_task_on_a_relayed_tool_is_the_upstreams_own_with_the_gateways_server_stamp(
    tmp_path: Path, tasks_fault: FaultServer
) -> None:
    with anyio.fail_after(60):
        async with gateway(tmp_path, tasks_fault, mode="auto", extension=True) as (client, server, rt):
            created = await client.session.call_tool(
                "slow_echo", {"text": "v2", "seconds": 0.2}, allow_claimed=True
            )
            assert isinstance(created, CreatedTask)
            done = await poll(client, created.task_id)
            long = await client.session.call_tool(
                "slow_echo", {"text": "x", "seconds": 600}, allow_claimed=True
            )
            assert isinstance(long, CreatedTask)
            as_other_principal(server)
            with pytest.raises(MCPError) as refused:
                await get(client, long.task_id)
            server._fallback = Principal.operator("stdio", "alice")
            await cancel(client, long.task_id)
            after = await get(client, long.task_id)
            stamp = server.server_info_stamp
            health = rt.mcp_tasks.health()
    assert created.task_id.startswith("ft-")
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"text": "v2"}
    assert done["_meta"][types.SERVER_INFO_META_KEY] == stamp  # the gateway answers, as for its own tasks
    assert refused.value.error.code == types.INVALID_PARAMS
    assert after["status"] == "cancelled"
    assert health["total"] == 0


async def test_a_2026_07_28_caller_of_a_2025_11_25_tasks_upstream_gets_an_ordinary_call(
    tmp_path: Path, tasks_fault: FaultServer
) -> None:
    """Eras are not translated: the upstream's tasks are relayed in the era it offers them only."""
    with anyio.fail_after(60):
        async with gateway(tmp_path, tasks_fault, extension=True) as (client, _, rt):
            answer = await client.session.call_tool("slow_echo", {"text": "inline"}, allow_claimed=True)
            health = rt.mcp_tasks.health()
    assert isinstance(answer, types.CallToolResult)
    assert answer.structured_content == {"text": "inline"}
    assert health["total"] == 0


async def test_an_unreachable_upstream_answers_a_relayed_task_call_as_it_answers_an_ordinary_one(
    tmp_path: Path, tasks_fault: FaultServer
) -> None:
    with anyio.fail_after(60):
        async with gateway(tmp_path, tasks_fault) as (client, _, _rt):
            await client.list_tools()
            tasks_fault.kill()
            call = {"name": "slow_echo", "arguments": {"text": "x"}, "task": {}}
            as_task = await rpc(client, "tools/call", call)
            ordinary = await client.call_tool("slow_echo", {"text": "x"})
    assert as_task["isError"] is True
    assert "task" not in as_task
    assert ordinary.is_error is True
    code = as_task["_meta"]["remoteops-gateway/error"]["code"]
    assert code == (ordinary.meta or {})["remoteops-gateway/error"]["code"]
    assert code in ("upstream_unavailable", "upstream_ambiguous")


def test_the_relayed_task_map_is_bounded_and_bound_to_its_principal_and_era() -> None:
    book = RelayedTaskMap(cap=3)
    for n in range(5):
        book.remember(RelayedTask(f"t{n}", "up", 0, "alice", "v1", "slow_echo"))
    assert len(book) == 3
    assert book.find("t0", "alice", "v1") is None  # the oldest were dropped
    assert book.find("t4", "alice", "v1") is not None
    assert book.find("t4", "bob", "v1") is None
    assert book.find("t4", "alice", "v2") is None
    assert [t.task_id for t in book.owned_by("alice", "v1")] == ["t4", "t3", "t2"]
