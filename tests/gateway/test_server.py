"""The MCP server reaches its runtime one way: the lifespan context (``ctx.lifespan_context``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server.lowlevel.server import Server

from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import GatewayServer, build_server
from gateway.tools import all_specs

# the file tools in the inspect toolset (excluded below, so the narrow catalog stays two tools)
_FILE_READS = ("remote_stat", "remote_read", "remote_list", "remote_find", "remote_grep")

pytestmark = pytest.mark.anyio


def _settings(state: Path, **extra: object) -> Settings:
    return Settings.model_validate({"state_dir": str(state), **extra})


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: server/discover (2026-07-28)
async def test_initialize_and_discover_carry_the_runtimes_own_description(tmp_path: Path, mode: str) -> None:
    targets = [{"name": "alpha", "host": "alpha.invalid"}, {"name": "beta", "host": "beta.invalid"}]
    async with Runtime(_settings(tmp_path / "s", targets=targets), all_specs(), redactor=Redactor()) as rt:
        server = build_server(rt, stdio_principal="test")
        assert server.instructions is None  # no second source next to the runtime
        with anyio.fail_after(20):
            async with Client(server, mode=mode) as client:
                instructions = client.instructions
                era = client.protocol_version
    assert era == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert instructions == rt.describe()
    assert "alpha, beta" in instructions


async def test_handlers_serve_whatever_runtime_the_lifespan_yields(tmp_path: Path) -> None:
    # Two runtimes; the server is built for one and handed the other through its lifespan: every handler
    # (tools/list, tools/call and its audit record, the instructions) must follow the lifespan.
    keep = {"gateway_health", "target_capabilities"}
    others = [s.name for s in all_specs() if s.toolset.value == "inspect" and s.name not in keep]
    narrow = {"tools": {"toolsets": ["inspect"], "exclude": others}}
    async with (
        Runtime(_settings(tmp_path / "a"), all_specs(), redactor=Redactor()) as built_for,
        Runtime(_settings(tmp_path / "b", **narrow), all_specs(), redactor=Redactor()) as served,
    ):

        @asynccontextmanager
        async def lifespan(_: Server[Runtime]) -> AsyncIterator[Runtime]:
            yield served

        server = GatewayServer(
            built_for.settings.server.name, version="t", lifespan=lifespan, stdio_principal="test"
        )
        with anyio.fail_after(20):
            async with Client(server, mode="legacy") as client:
                listed = {t.name for t in (await client.list_tools()).tools}
                result = await client.call_tool("gateway_health", {})
                instructions = client.instructions
            await served.audit.flush()
            await built_for.audit.flush()
    assert listed == set(served.catalog.enabled) == {"gateway_health", "target_capabilities"}
    assert result.structured_content is not None
    assert result.structured_content["filtered_out"] == list(served.catalog.filtered_out)
    assert instructions == served.describe()
    assert served.audit.status()["records_written"] == 1
    assert built_for.audit.status()["records_written"] == 0
