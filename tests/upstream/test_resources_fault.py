"""`Upstream.surface` against the fault-injecting upstream (a real process, over stdio and HTTP)."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types as types
import pytest

from tests.fixtures.fault_upstream import BASE_TOOLS, TEMPLATES
from tests.fixtures.procs import free_port
from tests.upstream.conftest import FaultServer, StdioFault
from upstream import Upstream, UpstreamUnavailable

pytestmark = pytest.mark.anyio

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "modern-caller", "version": "1"},
    "example.org/trace": "t-1",
}


def text(result: types.ReadResourceResult) -> str:
    content = result.contents[0]
    assert isinstance(content, types.TextResourceContents)
    return content.text


async def test_a_modern_callers_request_envelope_is_not_forwarded_to_a_handshake_era_upstream(
    fault_stdio: StdioFault,
) -> None:
    # Over stdio the SDK serves one era per connection and refuses a 2026-07-28 envelope on a handshake one.
    async with Upstream(fault_stdio.settings()) as up:
        with anyio.fail_after(20):
            read = await up.surface.read_resource("fault://count/m1", meta=ENVELOPE)
            called = await up.call_tool("echo", {"text": "hi"}, meta=ENVELOPE)
            greeted = await up.surface.get_prompt("greet", {"name": "Ada"}, meta=ENVELOPE)
    assert text(read) == "1"
    assert called.is_error is not True
    assert called.structured_content == {"text": "hi"}
    assert greeted.messages


async def test_during_an_outage_lists_are_the_last_known_and_a_read_is_unavailable_after_call_wait(
    fault_http: FaultServer,
) -> None:
    async with Upstream(fault_http.settings(call_wait_s=0.5)) as up:
        with anyio.fail_after(30):
            await up.list_tools()
            templates = await up.surface.list_resource_templates()
            prompts = await up.surface.list_prompts()
            fault_http.kill()
            with pytest.raises(UpstreamUnavailable):
                await up.surface.read_resource("fault://count/never")
            during = await up.surface.list_resource_templates()
            prompts_during = await up.surface.list_prompts()
    assert templates is not None
    assert len(templates) == 3
    assert during == templates
    assert prompts is not None
    assert [prompt.name for prompt in prompts] == ["greet"]
    assert prompts_during == prompts
    assert "never" not in fault_http.counts()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_every_page_of_a_paginated_template_list_is_fetched_in_order(
    tmp_path: Path, transport: str
) -> None:
    if transport == "http":
        server = FaultServer(tmp_path, free_port(), page_size=1)  # one template per page
        await server.start()
        settings = server.settings()
    else:
        stdio = StdioFault(tmp_path)
        command = [*stdio.settings().command, "--page-size", "1"]
        settings = stdio.settings(command=command)
    try:
        async with Upstream(settings) as up:
            with anyio.fail_after(20):
                tools = await up.list_tools()  # connected (the tool list is paginated too)
                templates = await up.surface.list_resource_templates()
                read = await up.surface.read_resource("fault://count/paged")
    finally:
        if transport == "http":
            server.stop()
    assert len(tools) == len(BASE_TOOLS)
    assert templates is not None
    assert [t.uri_template for t in templates] == [t.uri_template for t in TEMPLATES]
    assert len(TEMPLATES) == 3  # three pages
    assert text(read) == "1"
