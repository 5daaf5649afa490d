"""libtmux-mcp's resource templates and prompts through the gateway, over stdio and streamable HTTP.

A client of the gateway sees exactly the templates and prompts a direct client of libtmux-mcp sees, reads
``tmux://sessions`` and gets ``run_and_wait`` with the same answers, and each read and get leaves one audit
record; an excluded template is neither listed nor readable; with the upstream killed a read is
``upstream_unavailable`` while the gateway's own tools keep answering.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from gateway._runtime import Runtime
from tests.fixtures import libtmux
from tests.fixtures.procs import free_port, stop_process, wait_for_port
from tests.gateway.conftest import read_audit
from tests.gateway.test_relay import health, serve_gateway, upstream_health

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

PROMPT_ARGS = {"command": "echo relayed-prompt", "pane_id": "%0", "timeout": "30"}
CONTENT_TEMPLATE = "tmux://panes/{pane_id}/content{?socket_name}"


def dump(items: Any) -> list[dict[str, Any]]:
    return [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items]


def wire(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return out


async def surface_of(client: Client) -> dict[str, Any]:
    return {
        "templates": dump((await client.list_resource_templates()).resource_templates),
        "resources": dump((await client.list_resources()).resources),
        "prompts": dump((await client.list_prompts()).prompts),
        "read": wire(await client.read_resource("tmux://sessions")),
        "prompt": wire(await client.get_prompt("run_and_wait", PROMPT_ARGS)),
    }


async def audit_records(rt: Runtime) -> list[dict[str, Any]]:
    """The audit records, once the (asynchronous) writer has written every one handed to it so far: read
    while the gateway runs, the file may not hold the last request's record yet."""
    return [json.loads(line) for line in (await read_audit(rt)).splitlines()]


@asynccontextmanager
async def libtmux_upstream(transport: str) -> AsyncIterator[tuple[dict[str, Any], Any]]:
    """A tmux server with one session, and libtmux-mcp on it: (gateway connection, direct client target)."""
    with libtmux.tmux_socket("gw-surface", session="s1") as socket:
        if transport == "stdio":
            env = libtmux.libtmux_env(socket)
            conn = {"name": "tmux", "transport": "stdio", "command": libtmux.stdio_command(), "env": env}
            yield {**conn, "connect_timeout_s": 30, "first_list_wait_s": 30}, libtmux.stdio_params(socket)
        else:
            async with libtmux.libtmux_http(socket) as url:
                yield (
                    {
                        "name": "tmux",
                        "transport": "http",
                        "url": url,
                        "connect_timeout_s": 30,
                        "first_list_wait_s": 30,
                    },
                    url,
                )


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_templates_prompts_a_read_and_a_prompt_through_the_gateway_equal_the_direct_answers(
    tmp_path: Path, transport: str
) -> None:
    async with libtmux_upstream(transport) as (conn, direct):
        with anyio.fail_after(60):
            async with Client(direct, mode="legacy", cache=None) as client:
                expected = await surface_of(client)
            async with serve_gateway(tmp_path, upstreams=[{"connection": conn}]) as (client, rt):
                capabilities = client.server_capabilities
                got = await surface_of(client)
                up = await upstream_health(client, "tmux")
            records = await audit_records(rt)
    assert len(expected["templates"]) == 6
    assert {p["name"] for p in expected["prompts"]} >= {"run_and_wait", "diagnose_failing_pane"}
    assert got == expected
    assert capabilities.resources is not None
    assert capabilities.resources.subscribe is False  # libtmux-mcp declares subscribe: false
    assert capabilities.prompts is not None
    assert capabilities.completions is not None
    assert (up["relayed_resource_templates"], up["relayed_prompts"]) == (6, len(expected["prompts"]))
    assert up["surface_dropped"] == []
    reads = [r for r in records if r["event"] == "resource_read"]
    gets = [r for r in records if r["event"] == "prompt_get"]
    assert [(r["uri"], r["upstream"], r["outcome"], r["toolset"]) for r in reads] == [
        ("tmux://sessions", "tmux", "ok", "upstream")
    ]
    assert [(r["prompt"], r["upstream"], r["outcome"]) for r in gets] == [("run_and_wait", "tmux", "ok")]
    digested = gets[0]["arguments"]
    assert set(digested) == set(PROMPT_ARGS)
    assert all(set(value) == {"len", "sha256_prefix"} for value in digested.values())
    assert "relayed-prompt" not in json.dumps(records)  # argument values only as digests
    assert reads[0]["duration_ms"] >= 0


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_excluded_template_is_neither_listed_nor_readable_and_the_refusal_is_audited(
    tmp_path: Path, transport: str
) -> None:
    async with libtmux_upstream(transport) as (conn, _):
        upstream = {"connection": conn, "exclude": [CONTENT_TEMPLATE, "diagnose_failing_pane"]}
        async with serve_gateway(tmp_path, upstreams=[upstream]) as (client, rt):
            with anyio.fail_after(60):
                templates = (await client.list_resource_templates()).resource_templates
                prompts = (await client.list_prompts()).prompts
                with pytest.raises(MCPError) as refused:
                    await client.read_resource("tmux://panes/%0/content")
                with pytest.raises(MCPError) as unknown:
                    await client.read_resource("tmux://nothing/here")
                with pytest.raises(MCPError) as refused_prompt:
                    await client.get_prompt("diagnose_failing_pane", {"pane_id": "%0"})
                allowed = await client.read_resource("tmux://panes/%0")
                up = await upstream_health(client, "tmux")
            records = await audit_records(rt)
    assert CONTENT_TEMPLATE not in {t.uri_template for t in templates}
    assert len(templates) == 5
    assert "diagnose_failing_pane" not in {p.name for p in prompts}
    assert refused.value.error.code == unknown.value.error.code == -32602  # filtered looks like unknown
    assert refused_prompt.value.error.code == -32602
    assert allowed.contents
    assert allowed.contents[0].uri == "tmux://panes/%0"
    assert {"kind": "resource_template", "name": CONTENT_TEMPLATE, "reason": "excluded"} in up[
        "surface_dropped"
    ]
    assert {"kind": "prompt", "name": "diagnose_failing_pane", "reason": "excluded"} in up["surface_dropped"]
    reads = [(r["uri"], r["outcome"]) for r in records if r["event"] == "resource_read"]
    assert reads == [
        ("tmux://panes/%0/content", "refused"),
        ("tmux://nothing/here", "refused"),
        ("tmux://panes/%0", "ok"),
    ]
    assert [(r["prompt"], r["outcome"]) for r in records if r["event"] == "prompt_get"] == [
        ("diagnose_failing_pane", "refused")
    ]


async def until_not_connected(client: Client) -> None:
    """Poll gateway_health until the gateway has seen its stdio upstream go (the caller bounds it): a read
    written to the dead process's pipe before that is lost in flight (ambiguous), not refused."""
    while (await upstream_health(client, "tmux"))["state"] == "connected":  # noqa: ASYNC110 - health, polled
        await anyio.sleep(0.05)


# Over stdio, sh records its PID (exec keeps it: it is libtmux-mcp's) and refuses to start again once the
# stop file exists, so the upstream the gateway replaces after the kill stays down.
_STOPPABLE = 'if [ -e "$1" ]; then exit 1; fi; echo $$ > "$2"; exec "$3"'


@asynccontextmanager
async def killable_libtmux(
    transport: str, socket: str, work: Path
) -> AsyncIterator[tuple[dict[str, Any], Any]]:
    """libtmux-mcp on ``socket`` as the gateway's upstream: its connection, and a function that kills it
    for good."""
    common = {"name": "tmux", "connect_timeout_s": 30, "first_list_wait_s": 30, "call_wait_s": 1}
    if transport == "stdio":
        stop, pid_file = work / "stop", work / "upstream.pid"
        command = ["/bin/sh", "-c", _STOPPABLE, "sh", str(stop), str(pid_file), *libtmux.stdio_command()]

        def kill_stdio() -> None:
            stop.touch()
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the gateway's child; it reaps it

        env = libtmux.libtmux_env(socket)
        yield {**common, "transport": "stdio", "command": command, "env": env}, kill_stdio
        return
    port = free_port()
    proc = libtmux.spawn_http(socket, port)
    try:
        await wait_for_port(port, proc, ceiling_s=libtmux.READY_S)
        yield {**common, "transport": "http", "url": libtmux.http_url(port)}, lambda: stop_process(proc)
    finally:
        stop_process(proc)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_with_the_upstream_killed_a_read_is_upstream_unavailable_and_own_tools_keep_answering(
    tmp_path: Path, transport: str
) -> None:
    with libtmux.tmux_socket("gw-surface-kill", session="s1") as socket:
        async with (
            killable_libtmux(transport, socket, tmp_path) as (conn, kill),
            serve_gateway(tmp_path, upstreams=[{"connection": conn}]) as (client, rt),
        ):
            with anyio.fail_after(60):
                before = await client.read_resource("tmux://sessions")
                kill()
                if transport == "stdio":  # over HTTP the next read is refused at connect: nothing sent
                    await until_not_connected(client)
                with pytest.raises(MCPError) as lost:
                    await client.read_resource("tmux://sessions")
                with pytest.raises(MCPError) as lost_prompt:
                    await client.get_prompt("run_and_wait", PROMPT_ARGS)
                own = await health(client)
                templates = (await client.list_resource_templates()).resource_templates
            records = await audit_records(rt)
    assert before.contents
    for error in (lost.value.error, lost_prompt.value.error):
        assert error.code == -32603
        assert isinstance(error.data, dict)
        assert error.data["code"] == "upstream_unavailable"
        assert error.data["retryable"] is True
    assert own["version"]  # the gateway's own tool answered
    assert len(templates) == 6  # the last lists known are still listed
    reads = [(r["outcome"], r["error_code"]) for r in records if r["event"] == "resource_read"]
    assert reads == [("ok", None), ("error", "upstream_unavailable")]
