"""The upstream's own MCP tasks through `Upstream.tasks`: which era an upstream offers, a task-augmented call
answered by the upstream's own ``CreateTaskResult`` untouched, polling, the result and cancel — against the
real fault upstream process (``--tasks``) in both eras (2025-11-25 over the handshake, 2026-07-28 over
``server/discover`` with the extension declared per request)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.upstream.conftest import FaultServer, running_fault
from upstream import Upstream, UpstreamRejected, UpstreamTasks

pytestmark = pytest.mark.anyio

MISSING_CAPABILITY = -32021


@pytest.fixture
async def tasks_fault(tmp_path: Path) -> AsyncIterator[FaultServer]:
    async with running_fault(tmp_path, "--tasks") as server:
        yield server


async def _terminal(tasks: UpstreamTasks, task_id: str, era: Any) -> dict[str, Any]:
    """``tasks/get`` until the task is terminal (the caller bounds it)."""
    while True:
        got = await tasks.get(task_id, era)
        if got["status"] in ("completed", "failed", "cancelled"):
            return got
        await anyio.sleep(0.05)


async def test_a_2025_11_25_upstream_with_tasks_creates_its_own_task_whose_result_comes_back_untouched(
    tasks_fault: FaultServer,
) -> None:
    with anyio.fail_after(30):
        async with Upstream(tasks_fault.settings()) as up:
            await up.list_tools()
            era = up.tasks.era
            created = await up.tasks.call_tool(
                "slow_echo", {"text": "hi", "seconds": 0.2}, "v1", ttl_ms=90_000
            )
            task_id = created["task"]["taskId"]
            listed = await up.tasks.list()
            result = await up.tasks.result(task_id)
            done = await up.tasks.get(task_id, "v1")
            with pytest.raises(UpstreamRejected) as late:
                await up.tasks.cancel(task_id, "v1")
    assert era == "v1"
    assert task_id.startswith("ft-")  # the upstream's id, not one the relay made up
    assert (created["task"]["status"], created["task"]["ttl"]) == ("working", 90_000)
    assert task_id in [t["taskId"] for t in listed["tasks"]]
    assert result["structuredContent"] == {"text": "hi"}
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert done["status"] == "completed"
    assert late.value.code == types.INVALID_PARAMS  # a terminal task cannot be cancelled: the upstream says


async def test_a_2026_07_28_upstream_with_the_extension_gets_it_declared_on_each_task_request_only(
    tasks_fault: FaultServer,
) -> None:
    with anyio.fail_after(30):
        async with Upstream(tasks_fault.settings(mode="auto")) as up:
            await up.list_tools()
            era = up.tasks.era
            created = await up.tasks.call_tool("slow_echo", {"text": "v2", "seconds": 0.1}, "v2")
            done = await _terminal(up.tasks, created["taskId"], "v2")
            long = await up.tasks.call_tool("slow_echo", {"text": "never", "seconds": 600}, "v2")
            cancelled = await up.tasks.cancel(long["taskId"], "v2")
            after = await up.tasks.get(long["taskId"], "v2")
            updated = await up.tasks.update(long["taskId"], {})
            plain = await up.call_tool("slow_echo", {"text": "inline"})  # no declaration: never a task
    assert era == "v2"
    assert up.health().protocol_version == "2026-07-28"
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"text": "v2"}
    assert "_meta" in cancelled  # the extension's empty result with the upstream's own serverInfo stamp
    assert after["status"] == "cancelled"
    assert "taskId" not in updated
    assert plain.structured_content == {"text": "inline"}


async def test_an_upstream_without_tasks_offers_none_in_either_era(fault_http: FaultServer) -> None:
    with anyio.fail_after(30):
        for mode in ("legacy", "auto"):
            async with Upstream(fault_http.settings(mode=mode)) as up:
                await up.list_tools()
                assert up.tasks.era is None, mode


async def test_tasks_requests_without_the_declaration_are_refused_by_a_2026_upstream(
    tasks_fault: FaultServer,
) -> None:
    """The fixture checks the declaration as the extension asks: so the relay's declaration is what made
    the other test's requests pass (a v1-shaped request on the modern leg declares nothing)."""
    with anyio.fail_after(30):
        async with Upstream(tasks_fault.settings(mode="auto")) as up:
            await up.list_tools()
            with pytest.raises(UpstreamRejected) as refused:
                await up.tasks.get("ft-unknown", "v1")
    assert refused.value.code == MISSING_CAPABILITY
