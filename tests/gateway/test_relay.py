"""Issue #4 "Upstream relay", seen from a client of the gateway.

Real processes only: the fault-injecting upstream (``tests/fixtures/fault_upstream.py``) over streamable
HTTP (and stdio), the gateway in-process behind a real MCP client (JSON-RPC framing, ``mode="legacy"``),
and the gateway as a subprocess over HTTP for the SDK hazard. Every wait is bounded with
``anyio.fail_after``; conditions the client cannot be notified of (an upstream reconnect that publishes an
unchanged tool list) are polled through ``gateway_health`` inside such a bound, like ``wait_for_port``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client

from gateway._dispatch import error_payload
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.mcp_client import all_tools
from tests.fixtures.procs import free_port
from tests.upstream.conftest import FAST_BACKOFF, STDIO_START, FaultServer, fault_command

pytestmark = pytest.mark.anyio

SECRET = "Relay-Planted-Secret-0x7e1a9c"
FAULT_TOOLS = {
    "echo",
    "count",
    "slow",
    "work",
    "shout",
    "die",
    "progress",
    "reject",
    "failing",
    "mismatch",
    "add_tool",
    "ask",
}


# ----------------------------------------------------------------------------------------- helpers


class Inbox:
    """A client ``message_handler`` that counts ``notifications/tools/list_changed`` and wakes waiters."""

    def __init__(self) -> None:
        self.list_changed = 0
        self._arrived = anyio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed += 1
            self._arrived.set()
            self._arrived = anyio.Event()

    async def wait_beyond(self, seen: int) -> None:
        """Return once more than ``seen`` list_changed notifications have arrived (caller bounds it)."""
        while self.list_changed <= seen:
            await self._arrived.wait()


def connection(fault: FaultServer, **overrides: Any) -> dict[str, Any]:
    return {"name": "fault", "transport": "http", "url": fault.url, **FAST_BACKOFF, **overrides}


def entry(fault: FaultServer, conn: dict[str, Any] | None = None, **gating: Any) -> dict[str, Any]:
    return {"connection": connection(fault, **(conn or {})), **gating}


@asynccontextmanager
async def serve_gateway(
    tmp_path: Path, inbox: Inbox | None = None, secrets: Iterable[str] = (), **settings: Any
) -> AsyncIterator[tuple[Client, Runtime]]:
    """The gateway in-process (runtime + MCP server) and one client on it that hears notifications."""
    cfg = Settings.model_validate({"state_dir": str(tmp_path / "state"), **settings})
    async with Runtime(cfg, all_specs(), redactor=Redactor(secrets)) as rt:
        server = build_server(rt, stdio_principal="test")
        async with Client(server, mode="legacy", cache=None, message_handler=inbox) as client:
            yield client, rt


async def names(client: Client) -> set[str]:
    return {tool.name for tool in await all_tools(client)}


def dump(tool: types.Tool) -> dict[str, Any]:
    return tool.model_dump(by_alias=True, exclude_none=True, mode="json")


async def wait_listed(client: Client, inbox: Inbox, wanted: set[str]) -> set[str]:
    """List until ``wanted`` are served, waiting on the gateway's list_changed between tries."""
    while True:
        seen = inbox.list_changed
        listed = await names(client)
        if wanted <= listed:
            return listed
        await inbox.wait_beyond(seen)


async def health(client: Client) -> dict[str, Any]:
    result = await client.call_tool("gateway_health", {})
    assert result.is_error is not True
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def upstream_health(client: Client, name: str = "fault") -> dict[str, Any]:
    ups = (await health(client))["upstreams"]
    return next(u for u in ups if u["name"] == name)


async def poll_upstream(client: Client, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll gateway_health until the upstream section satisfies ``predicate`` (caller bounds it)."""
    while True:
        up = await upstream_health(client)
        if predicate(up):
            return up
        await anyio.sleep(0.05)


async def until_dropped(client: Client, inbox: Inbox, name: str) -> dict[str, Any]:
    """The upstream's health once it lists ``name`` as dropped, checked again on each list_changed (caller
    bounds it)."""
    while True:
        seen = inbox.list_changed
        up = await upstream_health(client)
        if name in {d["name"] for d in up["dropped"]}:
            return up
        await inbox.wait_beyond(seen)


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error is True, result
    error = error_payload(result)
    assert error is not None, result
    return error


async def raw_call(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """tools/call without the SDK client's outputSchema re-validation (what a relay must not do)."""
    request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
    return await client.session.send_request(request, types.CallToolResult)


async def kill_when_started(fault: FaultServer, call_id: str) -> None:
    response = await fault.control("GET", "/control/started", call_id=call_id)
    assert response.status_code == 200
    fault.kill()


# ------------------------------------------------------------------ own tools through upstream faults


async def test_own_tools_keep_answering_through_an_upstream_kill_and_relaying_resumes_after_restart(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    call_wait_s = 1.5
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault, {"call_wait_s": call_wait_s})]) as (
        client,
        _,
    ):
        with anyio.fail_after(30):
            before = await wait_listed(client, inbox, FAULT_TOOLS)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_when_started, fault, "kill-1")
                killed = await client.call_tool("slow", {"call_id": "kill-1"})
        error = error_of(killed)
        assert error["code"] == "upstream_ambiguous"
        assert error["retryable"] is False
        assert error["details"]["may_have_run"] is True
        assert fault.counts()["kill-1"] == 1  # ran once, never re-sent

        with anyio.fail_after(5):  # the upstream is dead: own tools and tools/list still answer at once
            listed_during = await names(client)
            # (health says "connected" for the few ms the dead client takes to tear down)
            during = await poll_upstream(client, lambda u: u["state"] != "connected")
        assert during["ambiguous_losses"] == 1
        assert listed_during == before  # the last known relayed tools stay listed

        started = anyio.current_time()
        with anyio.fail_after(call_wait_s + 10):
            unavailable = await client.call_tool("echo", {"text": "during the outage"})
        waited = anyio.current_time() - started
        error = error_of(unavailable)
        assert error["code"] == "upstream_unavailable"
        assert error["retryable"] is True
        assert waited < call_wait_s + 5

        await fault.start()  # the operator restarts nothing in the gateway
        with anyio.fail_after(30):
            await poll_upstream(client, lambda u: u["state"] == "connected" and u["connect_successes"] >= 2)
            back = await client.call_tool("echo", {"text": "back"})
        assert back.is_error is not True
        assert back.structured_content == {"text": "back"}


@pytest.mark.slow  # starts its own upstream process
async def test_a_gateway_started_while_the_upstream_is_down_serves_its_own_tools_and_relays_once_it_is_up(
    tmp_path: Path,
) -> None:
    state = tmp_path / "fault"
    state.mkdir()
    fault = FaultServer(state, free_port())  # not started yet: nothing listens on the port
    inbox = Inbox()
    try:
        async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, _):
            with anyio.fail_after(5):
                listed = await names(client)
                up = await upstream_health(client)
            assert "gateway_health" in listed
            assert not listed & FAULT_TOOLS
            assert up["state"] != "connected"
            assert up["tool_count"] is None
            # A relayed name cannot be known yet: a retryable upstream_unavailable, not "unknown tool".
            with anyio.fail_after(30):
                early = await client.call_tool("echo", {"text": "early"})
            error = error_of(early)
            assert error["code"] == "upstream_unavailable"
            assert error["retryable"] is True
            assert error["details"]["upstreams"] == ["fault"]

            await fault.start()
            with anyio.fail_after(30):
                await wait_listed(client, inbox, FAULT_TOOLS)  # list_changed told the client
                echoed = await client.call_tool("echo", {"text": "late"})
            assert echoed.structured_content == {"text": "late"}
    finally:
        fault.stop()


@pytest.mark.slow  # starts its own upstream process
async def test_a_stdio_upstream_killed_mid_call_gives_upstream_ambiguous_and_is_respawned(
    tmp_path: Path,
) -> None:
    state = tmp_path / "fault"
    state.mkdir()
    command = fault_command("--state-dir", str(state), "--stdio")
    conn = {"name": "fault", "transport": "stdio", "command": command, **FAST_BACKOFF, **STDIO_START}
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[{"connection": conn}]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
            died = await client.call_tool("die", {"call_id": "stdio-die"})
        error = error_of(died)
        assert error["code"] == "upstream_ambiguous"
        assert error["details"]["may_have_run"] is True
        with anyio.fail_after(5):
            assert "gateway_health" in await names(client)
        with anyio.fail_after(30):
            await poll_upstream(client, lambda u: u["state"] == "connected" and u["connect_successes"] >= 2)
            counted = await client.call_tool("count", {"call_id": "stdio-after"})
        assert counted.is_error is not True
    counts = json.loads((state / "counts.json").read_text())
    assert counts == {"stdio-die": 1, "stdio-after": 1}


# --------------------------------------------------------------------------- the SDK hazard over HTTP


async def _gateway_health_over_http(gw: GatewayProcess) -> dict[str, Any]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy", cache=None) as c:
        return await upstream_health(c)


async def test_an_upstream_http_failure_never_turns_the_gateway_http_listener_into_500s(
    tmp_path: Path, fault: FaultServer
) -> None:
    config = {"upstreams": [entry(fault, {"call_wait_s": 2.0})]}
    workdir = tmp_path / "gw"
    workdir.mkdir()
    with run_gateway(workdir, config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
        async with (
            http,
            Client(streamable_http_client(gw.url, http_client=http), mode="legacy", cache=None) as client,
        ):
            with anyio.fail_after(30):
                await poll_upstream(client, lambda u: u["state"] == "connected")
                died = await client.call_tool("die", {"call_id": "http-die"})  # the upstream exits mid-call
            assert error_of(died)["code"] == "upstream_ambiguous"
            assert fault.proc is not None
            await anyio.to_thread.run_sync(fault.proc.wait, 10)  # reap the upstream: it is gone

            with anyio.fail_after(10):  # the same session keeps working
                assert "gateway_health" in await names(client)
                down = await client.call_tool("echo", {"text": "nobody home"})
                # (health says "connected" until the dead client's teardown ends: ms, more under load)
                await poll_upstream(client, lambda u: u["state"] != "connected")
            assert error_of(down)["code"] == "upstream_unavailable"

        with anyio.fail_after(20):  # a fresh session and the unauthenticated probe too
            async with httpx.AsyncClient(timeout=10) as probe:
                healthz = await probe.get(gw.base + "/healthz")
            fresh = await _gateway_health_over_http(gw)
        assert healthz.status_code == 200
        assert fresh["ambiguous_losses"] == 1
        assert gw.proc.poll() is None


# ---------------------------------------------------------------------------------- lost sessions


async def test_a_forgotten_upstream_session_is_reinitialised_and_the_call_runs_exactly_once(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"count"})
            await fault.control("POST", "/control/forget", times=1)
            result = await client.call_tool("count", {"call_id": "forgot-once"})
            up = await upstream_health(client)
    assert result.is_error is not True
    assert fault.counts()["forgot-once"] == 1
    assert up["session_not_found_retries"] == 1


async def test_a_session_forgotten_twice_in_a_row_gives_upstream_unavailable_and_nothing_ran(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"count"})
            await fault.control("POST", "/control/forget", times=2)
            result = await client.call_tool("count", {"call_id": "forgot-twice"})
            after = await client.call_tool("count", {"call_id": "after-forgetting"})
    error = error_of(result)
    assert error["code"] == "upstream_unavailable"
    assert error["retryable"] is True
    assert "forgot-twice" not in fault.counts()
    assert after.is_error is not True


# ------------------------------------------------------------------------------ faithful passthrough


async def test_relayed_tool_definitions_and_results_equal_what_a_direct_client_gets(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
            relayed = [t for t in await all_tools(client) if t.name in FAULT_TOOLS]
            via_gateway = {
                name: await raw_call(client, name, args)
                for name, args in [("echo", {"text": "héllo ✓"}), ("failing", {}), ("mismatch", {})]
            }
            with pytest.raises(MCPError) as gateway_reject:
                await client.call_tool("reject", {})
        async with Client(fault.url, mode="legacy", cache=None) as direct:
            with anyio.fail_after(30):
                expected = await all_tools(direct)
                direct_results = {
                    name: await raw_call(direct, name, args)
                    for name, args in [("echo", {"text": "héllo ✓"}), ("failing", {}), ("mismatch", {})]
                }
                with pytest.raises(MCPError) as direct_reject:
                    await direct.call_tool("reject", {})

    assert [dump(t) for t in relayed] == [dump(t) for t in expected]
    for name, result in via_gateway.items():
        assert result.model_dump(by_alias=True, exclude_none=True) == direct_results[name].model_dump(
            by_alias=True, exclude_none=True
        ), name
    assert via_gateway["failing"].is_error is True
    assert via_gateway["mismatch"].structured_content == {"n": "not-an-integer"}
    got, want = gateway_reject.value.error, direct_reject.value.error
    assert (got.code, got.message, got.data) == (want.code, want.message, want.data)
    assert got.code == -32602


async def test_upstream_progress_notifications_reach_the_calling_client(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"progress"})
            result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert result.is_error is not True
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


async def test_an_upstream_list_changed_is_forwarded_and_the_new_tool_is_relayed(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
            seen = inbox.list_changed
            await fault.wait_standalone_stream()  # the gateway's GET stream: where list_changed is sent
            added = await client.call_tool("add_tool", {"name": "fresh_tool"})
            # Listed once a list_changed made it so (a list_changed of the first connect may still arrive
            # after the first listing, and wake a single wait_beyond before the refresh was published).
            listed = await wait_listed(client, inbox, {"fresh_tool"})
            assert inbox.list_changed > seen
            with pytest.raises(MCPError) as called:  # routed to the upstream, which has no handler for it
                await client.call_tool("fresh_tool", {})
    assert added.is_error is not True
    assert "fresh_tool" in listed
    assert called.value.error.code == types.METHOD_NOT_FOUND  # the upstream's answer, not "unknown tool"


# ------------------------------------------------------------------------------------------- gating


async def test_include_exclude_and_prefix_decide_which_relayed_names_are_served(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    gating: dict[str, Any] = {
        "include": ["echo", "count", "failing"],
        "exclude": ["failing"],
        "prefix": "term_",
    }
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault, **gating)]) as (client, _):
        with anyio.fail_after(30):
            listed = await wait_listed(client, inbox, {"term_echo", "term_count"})
            echoed = await client.call_tool("term_echo", {"text": "prefixed"})
            up = await upstream_health(client)
            refused = {}
            for name in ("echo", "term_failing", "failing", "term_slow", "count"):
                with pytest.raises(MCPError) as info:
                    await client.call_tool(name, {"call_id": "gated"})
                refused[name] = info.value.error.code
    assert {n for n in listed if n.startswith("term_")} == {"term_echo", "term_count"}
    assert not listed & FAULT_TOOLS
    assert echoed.structured_content == {"text": "prefixed"}
    assert set(refused.values()) == {types.INVALID_PARAMS}  # unknown to the gateway, never sent
    assert "gated" not in fault.counts()
    assert up["relayed_tools"] == 2
    assert {d["name"] for d in up["dropped"]} == FAULT_TOOLS - {"echo", "count"}
    assert sorted((r["name"], r["exposed_as"]) for r in up["renamed"]) == [
        ("count", "term_count"),
        ("echo", "term_echo"),
    ]


async def test_a_relayed_tool_named_like_an_own_tool_is_dropped_under_prefer_own(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault, on_collision="prefer_own")]) as (
        client,
        _,
    ):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
            seen = inbox.list_changed
            await fault.wait_standalone_stream()  # the gateway's GET stream: where list_changed is sent
            await client.call_tool("add_tool", {"name": "gateway_health"})
            # Until the refresh is published (a late list_changed of the first connect may wake a single
            # wait_beyond before it): the dropped name shows in gateway_health, never in tools/list.
            up = await until_dropped(client, inbox, "gateway_health")  # answered by the own tool
            assert inbox.list_changed > seen
            tools = await all_tools(client)
    assert [t.name for t in tools].count("gateway_health") == 1
    assert "upstream_gateway_health" not in {t.name for t in tools}
    own = next(t for t in tools if t.name == "gateway_health")
    assert own.output_schema is not None  # the gateway's own definition, not the upstream's
    assert [d["name"] for d in up["dropped"]] == ["gateway_health"]
    assert up["renamed"] == []


async def test_a_relayed_tool_named_like_an_own_tool_is_served_renamed_under_prefix_upstream(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    upstreams = [entry(fault, on_collision="prefix_upstream")]
    async with serve_gateway(tmp_path, inbox, upstreams=upstreams) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
            seen = inbox.list_changed
            await fault.wait_standalone_stream()  # the gateway's GET stream: where list_changed is sent
            await client.call_tool("add_tool", {"name": "gateway_health"})
            listed = await wait_listed(client, inbox, {"upstream_gateway_health"})
            assert inbox.list_changed > seen
            up = await upstream_health(client)
            with pytest.raises(MCPError) as relayed:  # reaches the upstream, which has no handler for it
                await client.call_tool("upstream_gateway_health", {})
    assert "gateway_health" in listed
    assert up["renamed"] == [{"name": "gateway_health", "exposed_as": "upstream_gateway_health"}]
    assert up["dropped"] == []
    assert relayed.value.error.code == types.METHOD_NOT_FOUND


async def test_with_the_upstream_toolset_off_no_relayed_tool_is_listed_or_callable(
    tmp_path: Path, fault: FaultServer
) -> None:
    tools = {"toolsets": ["inspect", "manage", "execute"]}
    async with serve_gateway(tmp_path, upstreams=[entry(fault)], tools=tools) as (client, _):
        with anyio.fail_after(20):
            listed = await names(client)
            with pytest.raises(MCPError) as info:
                await client.call_tool("count", {"call_id": "toolset-off"})
            up = await upstream_health(client)
            instructions = client.instructions or ""
    assert "gateway_health" in listed
    assert not listed & FAULT_TOOLS
    assert info.value.error.code == types.INVALID_PARAMS
    assert "toolset-off" not in fault.counts()
    assert up["enabled"] is False
    assert up["relayed_tools"] == 0
    assert "tools relayed" not in instructions
    assert "'fault'" in instructions  # still named: configured, but not relayed


# -------------------------------------------------------------------------------------------- audit


async def test_a_relayed_call_leaves_one_upstream_audit_record_without_the_planted_secret(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault)]) as (client, rt):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"echo"})
            # one secret under a sensitive key (digested), one behind a pattern in a free-form field
            result = await client.call_tool("echo", {"text": SECRET, "note": f"--token={SECRET}"})
        audit_path = rt.settings.audit_path
    assert result.is_error is not True
    text = audit_path.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    relayed = [r for r in records if r.get("toolset") == "upstream"]
    assert len(relayed) == 1
    assert (relayed[0]["tool"], relayed[0]["outcome"], relayed[0]["principal"]) == ("echo", "ok", "test")
    assert SECRET not in text


# ------------------------------------------------------------------------------ self-description


def _listed_targets(instructions: str) -> list[str]:
    match = re.search(r"^Targets you may use \(the only ones allowed\): (.*)\.$", instructions, re.M)
    assert match is not None, instructions
    return [name.strip() for name in match.group(1).split(",")]


async def test_instructions_name_the_upstream_its_state_identity_and_relayed_count_truthfully(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    targets = [{"name": "alpha", "host": "alpha.invalid"}, {"name": "beta", "host": "beta.invalid"}]
    upstreams = [entry(fault, exclude=["die"])]
    async with serve_gateway(tmp_path, inbox, upstreams=upstreams, targets=targets) as (first, rt):
        with anyio.fail_after(30):
            relayed = await wait_listed(first, inbox, FAULT_TOOLS - {"die"}) & FAULT_TOOLS
        async with Client(build_server(rt, stdio_principal="test"), mode="legacy", cache=None) as client:
            with anyio.fail_after(20):
                instructions = client.instructions or ""
                up = await upstream_health(client)
                listed = await client.call_tool("target_list", {})
        async with Client(fault.url, mode="legacy", cache=None) as direct:
            info = direct.server_info
    assert info is not None
    assert (up["server_name"], up["server_version"]) == (info.name, info.version)
    line = next(ln for ln in instructions.splitlines() if ln.startswith("Upstream 'fault'"))
    assert f"({up['transport']})" in line
    assert f"state {up['state']}" in line
    assert up["state"] == "connected"
    assert f"server {info.name} {info.version}" in line
    assert f"{len(relayed)} tools relayed" in line
    assert isinstance(listed.structured_content, dict)
    assert _listed_targets(instructions) == [t["name"] for t in listed.structured_content["targets"]]
