"""Relayed resources, prompts and completions against the fault-injecting upstream (real processes).

Fault semantics equal the tools': a read whose upstream dies mid-read is ``upstream_ambiguous`` and never
re-sent; a read the upstream refused with "session not found" is re-sent once, on a fresh session.
Subscriptions and list_changed are forwarded; collisions between two upstreams follow the documented rule
and are listed in ``gateway_health``; with no upstream that has them, no capability is advertised.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage

from tests.fixtures.procs import free_port
from tests.gateway.test_relay import connection, poll_upstream, serve_gateway, upstream_health
from tests.upstream.conftest import FAST_BACKOFF, STDIO_START, FaultServer, fault_command

pytestmark = pytest.mark.anyio


class SurfaceFault(FaultServer):
    """The fault upstream with its two surface tools (touch, add_prompt)."""

    def spawn(self) -> subprocess.Popen[bytes]:
        argv = fault_command("--state-dir", str(self.state_dir), "--surface-tools", "--http", str(self.port))
        argv += ["--page-size", str(self.page_size)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return self.proc


@asynccontextmanager
async def surface_fault(state_dir: Path, page_size: int = 4) -> AsyncIterator[SurfaceFault]:
    await anyio.Path(state_dir).mkdir()
    server = SurfaceFault(state_dir, free_port(), page_size)
    await server.start()
    try:
        yield server
    finally:
        server.stop()


class Notices:
    """A client ``message_handler`` keeping resource/prompt notifications; wakes waiters."""

    def __init__(self) -> None:
        self.received: list[IncomingMessage] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        kinds = (
            types.ResourceUpdatedNotification,
            types.PromptListChangedNotification,
            types.ResourceListChangedNotification,
        )
        if isinstance(message, kinds):
            self.received.append(message)
            self._arrived.set()
            self._arrived = anyio.Event()

    async def wait_for(self, kind: type[Any]) -> Any:
        """The first notice of ``kind`` (caller bounds the wait)."""
        while True:
            for message in self.received:
                if isinstance(message, kind):
                    return message
            await self._arrived.wait()


async def subscription(client: Client, uri: str, *, subscribe: bool) -> None:
    """resources/(un)subscribe on the wire (the SDK's helpers warn: removed in 2026-07-28)."""
    if subscribe:
        request: Any = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
    else:
        request = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
    await client.session.send_request(request, types.EmptyResult)


def text(result: types.ReadResourceResult) -> str:
    content = result.contents[0]
    assert isinstance(content, types.TextResourceContents)
    return content.text


def audit_records(state_dir: Path, event: str) -> list[dict[str, Any]]:
    lines = (state_dir / "audit.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["event"] == event]


async def test_a_read_whose_stdio_upstream_dies_mid_read_is_ambiguous_and_never_sent_again(
    tmp_path: Path,
) -> None:
    command = fault_command("--state-dir", str(tmp_path), "--stdio")
    conn = {"name": "fault", "transport": "stdio", "command": command, **FAST_BACKOFF, **STDIO_START}
    async with serve_gateway(tmp_path, upstreams=[{"connection": conn}]) as (client, rt):
        with anyio.fail_after(30):
            with pytest.raises(MCPError) as lost:
                await client.read_resource("fault://die/d1")
            await poll_upstream(
                client, lambda up: up["state"] == "connected" and up["connect_successes"] >= 2
            )
            after = await client.read_resource("fault://count/after")
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert lost.value.error.code == -32603
    assert isinstance(lost.value.error.data, dict)
    assert lost.value.error.data["code"] == "upstream_ambiguous"
    assert lost.value.error.data["details"]["may_have_run"] is True
    assert text(after) == "1"
    assert counts["d1"] == 1  # ran once, never re-sent on the new connection
    reads = audit_records(rt.settings.state_dir, "resource_read")
    assert [(r["uri"], r["error_code"]) for r in reads] == [
        ("fault://die/d1", "upstream_ambiguous"),
        ("fault://count/after", None),
    ]


async def test_a_read_refused_with_session_not_found_is_sent_again_once_and_runs_once(
    tmp_path: Path, fault: FaultServer
) -> None:
    async with serve_gateway(tmp_path, upstreams=[{"connection": connection(fault)}]) as (client, _):
        with anyio.fail_after(30):
            first = await client.read_resource("fault://count/s1")
            response = await fault.control("POST", "/control/forget", times=1)
            assert response.status_code == 200
            second = await client.read_resource("fault://count/s2")
            up = await upstream_health(client)
    assert (text(first), text(second)) == ("1", "1")
    assert fault.counts()["s2"] == 1
    assert up["session_not_found_retries"] == 1


async def test_subscriptions_resource_updates_and_prompt_list_changes_reach_the_client(
    tmp_path: Path,
) -> None:
    async with surface_fault(tmp_path / "fault") as fault:
        notices = Notices()
        settings: dict[str, Any] = {"upstreams": [{"connection": connection(fault, first_list_wait_s=20)}]}
        async with serve_gateway(tmp_path, notices, **settings) as (client, _):  # type: ignore[arg-type]
            with anyio.fail_after(30):
                capabilities = client.server_capabilities
                await subscription(client, "fault://static", subscribe=True)
                subscribed = json.loads((fault.state_dir / "subscribed.json").read_text())
                await fault.wait_standalone_stream()  # the gateway's GET stream: where updates are sent
                await client.call_tool("touch", {"uri": "fault://static"})
                updated = await notices.wait_for(types.ResourceUpdatedNotification)
                await client.call_tool("add_prompt", {"name": "later"})
                await notices.wait_for(types.PromptListChangedNotification)
                prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
                await subscription(client, "fault://static", subscribe=False)
                unsubscribed = json.loads((fault.state_dir / "subscribed.json").read_text())
    assert capabilities.resources is not None
    assert capabilities.resources.subscribe is True
    assert subscribed == ["fault://static"]
    assert updated.params.uri == "fault://static"
    assert prompts == {"greet", "later"}
    assert unsubscribed == []


async def test_two_upstreams_serving_the_same_prompt_and_templates_collide_by_the_documented_rule(
    tmp_path: Path,
) -> None:
    async with surface_fault(tmp_path / "one") as one, surface_fault(tmp_path / "two") as two:
        upstreams = [
            {"connection": connection(one, name="one", first_list_wait_s=20)},
            {
                "connection": connection(two, name="two", first_list_wait_s=20),
                "on_collision": "prefix_upstream",
            },
        ]
        async with serve_gateway(tmp_path, upstreams=upstreams) as (client, rt):
            with anyio.fail_after(30):
                prompts = [prompt.name for prompt in (await client.list_prompts()).prompts]
                templates = [
                    t.uri_template for t in (await client.list_resource_templates()).resource_templates
                ]
                greeted = await client.get_prompt("upstream_greet", {"name": "Ada"})
                completed = await client.complete(
                    types.PromptReference(type="ref/prompt", name="upstream_greet"),
                    {"name": "name", "value": "a"},
                )
                read = await client.read_resource("fault://count/c1")
                second = await upstream_health(client, "two")
    assert prompts == ["greet", "upstream_greet"]
    assert templates == ["fault://count/{call_id}", "fault://slow/{call_id}", "fault://die/{call_id}"]
    message = greeted.messages[0].content
    assert isinstance(message, types.TextContent)
    assert message.text == "Hello Ada"
    assert completed.completion.values == ["alpha"]
    assert text(read) == "1"
    assert one.counts() == {"c1": 1}  # routed to the first upstream only
    assert two.counts() == {}
    assert {"kind": "prompt", "name": "greet", "exposed_as": "upstream_greet"} in second["surface_renamed"]
    dropped = {(d["kind"], d["name"]) for d in second["surface_dropped"]}
    assert dropped == {
        ("resource", "fault://static"),
        ("resource_template", "fault://count/{call_id}"),
        ("resource_template", "fault://slow/{call_id}"),
        ("resource_template", "fault://die/{call_id}"),
    }
    gets = audit_records(rt.settings.state_dir, "prompt_get")
    assert [(g["prompt"], g["upstream"], g["outcome"]) for g in gets] == [("upstream_greet", "two", "ok")]


async def test_without_an_upstream_that_has_them_no_resource_prompt_or_completion_capability_is_offered(
    tmp_path: Path,
) -> None:
    async with serve_gateway(tmp_path) as (client, _):
        with anyio.fail_after(10):
            capabilities = client.server_capabilities
            with pytest.raises(MCPError) as resources:
                await client.list_resources()
            with pytest.raises(MCPError) as prompts:
                await client.list_prompts()
    assert capabilities.tools is not None
    assert (capabilities.resources, capabilities.prompts, capabilities.completions) == (None, None, None)
    assert resources.value.error.code == prompts.value.error.code == types.METHOD_NOT_FOUND


async def subscribed_upstream(fault: FaultServer) -> list[str]:
    """Poll the fault upstream's subscription file until it names a URI (the caller bounds it; the
    re-subscription is no event the test can be notified of, like a port opening)."""
    path = anyio.Path(fault.state_dir / "subscribed.json")
    while True:
        try:
            found: list[str] = json.loads(await path.read_text())
        except FileNotFoundError:
            found = []
        except json.JSONDecodeError:  # read between the upstream's truncate and write (not atomic)
            found = []
        if found:
            return found
        await anyio.sleep(0.05)


async def test_a_subscription_is_made_again_upstream_after_the_upstream_restarts(tmp_path: Path) -> None:
    async with surface_fault(tmp_path / "fault") as fault:
        settings: dict[str, Any] = {"upstreams": [{"connection": connection(fault, first_list_wait_s=20)}]}
        async with serve_gateway(tmp_path, **settings) as (client, _):
            with anyio.fail_after(45):
                await subscription(client, "fault://static", subscribe=True)
                before = await subscribed_upstream(fault)
                fault.kill()
                (fault.state_dir / "subscribed.json").unlink()  # the new process starts knowing nothing
                await fault.start()
                # The next request meets "session not found" and is sent again on a new connection.
                probe = await client.read_resource("fault://count/restart-probe")
                after = await subscribed_upstream(fault)
    assert before == after == ["fault://static"]
    assert text(probe) == "1"


async def test_without_the_upstream_toolset_the_relayed_surface_is_not_served_and_nothing_reaches_it(
    tmp_path: Path,
) -> None:
    # The operator's toolsets are the outer limit: no `upstream`, no relayed resources or prompts at all —
    # the capabilities are not advertised (-32601) and no read reaches the upstream. (A caller whose token
    # lacks the upstream scope on a gateway that serves them: tests/gateway/test_oauth_gateway.py.)
    async with surface_fault(tmp_path / "fault") as fault:
        settings: dict[str, Any] = {
            "upstreams": [{"connection": connection(fault, first_list_wait_s=20)}],
            "tools": {"toolsets": ["inspect"]},
        }
        async with serve_gateway(tmp_path, **settings) as (client, _):
            with anyio.fail_after(30):
                capabilities = client.server_capabilities
                codes: list[int] = []
                for attempt in (
                    client.list_resources,
                    client.list_prompts,
                    lambda: client.read_resource("fault://count/gated"),
                    lambda: client.get_prompt("greet", {"name": "Ada"}),
                ):
                    with pytest.raises(MCPError) as refused:
                        await attempt()
                    codes.append(refused.value.error.code)
    assert (capabilities.resources, capabilities.prompts) == (None, None)
    assert codes == [-32601] * 4
    assert fault.counts() == {}


async def pages(fetch: Any) -> list[list[dict[str, Any]]]:
    """Every page of one list as a direct client sees it (``fetch(cursor)`` → result, items)."""
    out: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        result, items = await fetch(cursor)
        out.append([item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items])
        cursor = result.next_cursor
        if cursor is None:
            return out


@pytest.mark.slow  # one item per page: the tool list alone is 15 pages
async def test_every_page_of_the_upstreams_resource_template_and_prompt_lists_is_merged_in_order(
    tmp_path: Path,
) -> None:
    async with surface_fault(tmp_path / "fault", page_size=1) as fault:
        notices = Notices()
        settings: dict[str, Any] = {"upstreams": [{"connection": connection(fault, first_list_wait_s=20)}]}
        async with serve_gateway(tmp_path, notices, **settings) as (client, _):  # type: ignore[arg-type]
            with anyio.fail_after(30):
                await fault.wait_standalone_stream()  # the list_changed of each addition reaches the gateway
                for name in ("one", "two"):  # three resources and three prompts: three pages each
                    for tool, added_name in (("add_resource", name), ("add_prompt", f"p-{name}")):
                        added = await client.call_tool(tool, {"name": added_name})
                        assert added.is_error is not True, (tool, added.content)
                async with Client(fault.url, mode="legacy", cache=None) as direct:

                    async def resources(cursor: str | None) -> Any:
                        result = await direct.list_resources(cursor=cursor)
                        return result, result.resources

                    async def templates(cursor: str | None) -> Any:
                        result = await direct.list_resource_templates(cursor=cursor)
                        return result, result.resource_templates

                    async def prompts(cursor: str | None) -> Any:
                        result = await direct.list_prompts(cursor=cursor)
                        return result, result.prompts

                    upstream_pages = [await pages(fetch) for fetch in (resources, templates, prompts)]
                listed_resources = await client.list_resources()
                listed_templates = await client.list_resource_templates()
                listed_prompts = await client.list_prompts()
    got = (listed_resources, listed_templates, listed_prompts)
    merged = [
        [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items]
        for items in (listed_resources.resources, listed_templates.resource_templates, listed_prompts.prompts)
    ]
    assert [len(p) for p in upstream_pages] == [3, 3, 3]  # the upstream really answers one item per page
    assert all(len(one) == 1 for p in upstream_pages for one in p)
    assert merged == [[item for one in p for item in one] for p in upstream_pages]  # all pages, in order
    assert [r["uri"] for r in merged[0]] == ["fault://static", "fault://added/one", "fault://added/two"]
    assert [result.next_cursor for result in got] == [None, None, None]  # the gateway serves one page


async def test_an_upstreams_resources_list_changed_reaches_the_client_and_the_next_list_is_fresh(
    tmp_path: Path,
) -> None:
    async with surface_fault(tmp_path / "fault") as fault:
        notices = Notices()
        settings: dict[str, Any] = {"upstreams": [{"connection": connection(fault, first_list_wait_s=20)}]}
        async with serve_gateway(tmp_path, notices, **settings) as (client, _):  # type: ignore[arg-type]
            with anyio.fail_after(30):
                before = [str(r.uri) for r in (await client.list_resources()).resources]
                await fault.wait_standalone_stream()  # the gateway's GET stream: where list_changed is sent
                await client.call_tool("add_resource", {"name": "late"})
                changed = await notices.wait_for(types.ResourceListChangedNotification)
                after = [str(r.uri) for r in (await client.list_resources()).resources]
                read = await client.read_resource("fault://added/late")
    assert changed.method == "notifications/resources/list_changed"
    assert before == ["fault://static"]
    assert after == ["fault://static", "fault://added/late"]
    assert text(read) == "added fault://added/late"


async def test_completion_of_a_resource_template_argument_is_relayed_and_a_filtered_template_is_refused(
    tmp_path: Path, fault: FaultServer
) -> None:
    upstream = {"connection": connection(fault, first_list_wait_s=20), "exclude": ["fault://slow/{call_id}"]}
    async with serve_gateway(tmp_path, upstreams=[upstream]) as (client, _):
        with anyio.fail_after(30):
            served = await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="fault://count/{call_id}"),
                {"name": "call_id", "value": "count-b"},
            )
            refused: list[int] = []
            for uri in ("fault://slow/{call_id}", "fault://nothing/{x}"):  # filtered, unknown
                with pytest.raises(MCPError) as caught:
                    await client.complete(
                        types.ResourceTemplateReference(type="ref/resource", uri=uri),
                        {"name": "call_id", "value": ""},
                    )
                refused.append(caught.value.error.code)
    assert served.completion.values == ["count-beta"]  # the upstream saw the template's own reference
    assert refused == [types.INVALID_PARAMS] * 2  # filtered looks like unknown
