"""In-process gateway fixtures: a runtime on a temporary state directory and an MCP client on it; the
fault-injecting upstream over HTTP for the relay tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from gateway._catalog import AnySpec
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway._server import build_server
from gateway.config import Settings
from gateway.tools import all_specs
from tests.upstream.conftest import FaultServer, running_fault

ClientFactory = Callable[..., AbstractAsyncContextManager[tuple[Client, Runtime]]]


async def read_audit(rt: Runtime) -> str:
    """The audit file's text once every record handed to the (asynchronous) writer is on disk (bounded)."""
    with anyio.fail_after(10):
        await rt.audit.flush()
    return rt.settings.audit_path.read_text(encoding="utf-8")


@pytest.fixture
def gateway_client(tmp_path: Path) -> ClientFactory:
    """``async with gateway_client(extra_specs=..., **settings) as (client, runtime)``."""

    @asynccontextmanager
    async def factory(
        extra_specs: Sequence[AnySpec] = (), secrets: Sequence[str] = (), **settings: Any
    ) -> AsyncIterator[tuple[Client, Runtime]]:
        cfg = Settings.model_validate({"state_dir": str(tmp_path / "state"), **settings})
        async with Runtime(cfg, [*all_specs(), *extra_specs], redactor=Redactor(secrets)) as rt:
            server = build_server(rt, stdio_principal="test")
            async with Client(server, mode="legacy") as client:
                yield client, rt

    return factory


@pytest.fixture
async def fault(tmp_path: Path) -> AsyncIterator[FaultServer]:
    """The fault upstream over HTTP, its state under ``tmp_path / "fault"``."""
    state = tmp_path / "fault"
    state.mkdir()
    async with running_fault(state) as server:
        yield server
