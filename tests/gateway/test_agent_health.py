"""The agent through MCP: a target whose login shell prints a banner gets the agent and the file tools, and
``target_capabilities`` and ``gateway_health`` show per target the build of its agent; a stuck agent's
replacement (a new pid) shows in ``gateway_health``. Against the real OpenSSH sshd."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from remoteops.agent.boot import current_build
from tests.fixtures.mcp_client import carried
from tests.fixtures.procs import wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory
from tests.remoteops.test_agent_liveness import FAST, ping_agent  # noqa: F401 -- the fixture
from tests.remoteops.test_agent_liveness import _stopped as stopped

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A short directory the banner user can write to (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogb-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ok(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error is not True, result
    assert result.structured_content is not None
    return dict(result.structured_content)


def _config(sshd: SshdInstance, **transport: Any) -> dict[str, Any]:
    return {
        "transport": {
            "ssh_config_file": str(sshd.ssh_config),
            "control_dir": str(sshd.control_dir),
            **transport,
        },
        "targets": [
            {"name": "plain", "host": sshd.alias("plain")},
            {"name": "bashrc", "host": sshd.alias("bashrc")},
        ],
    }


async def test_a_banner_target_gets_the_agent_and_its_file_tools_and_shows_its_build(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    path = f"{shared_tmp}/banner.txt"
    async with gateway_client(**_config(sshd)) as (client, _):
        with anyio.fail_after(60):
            caps = _ok(await client.call_tool("target_capabilities", {"target": "bashrc"}))
            written = _ok(
                await client.call_tool("remote_write", {"target": "bashrc", "path": path, "content": "hi\n"})
            )
            read = await client.call_tool("remote_read", {"target": "bashrc", "path": path})
            health = _ok(await client.call_tool("gateway_health", {}))
    state = health["transport"]["carriers"]["bashrc"]
    assert caps["carrier"] == "agent"
    assert caps["agent_build"] == current_build()
    assert written["size"] == 3
    assert carried(read) == "hi\n"
    assert state["carrier"] == "agent"
    assert state["agent_build"] == current_build()
    assert state["agent_pid"] is not None


@pytest.mark.usefixtures("ping_agent")
async def test_gateway_health_shows_the_replacement_of_a_stuck_agent(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_config(sshd, carrier="agent", **FAST)) as (client, _):
        with anyio.fail_after(60):
            _ok(await client.call_tool("remote_exec", {"target": "plain", "argv": ["true"]}))
            before = _ok(await client.call_tool("gateway_health", {}))["transport"]["carriers"]["plain"]
            old = before["agent_pid"]
            assert old is not None
            with stopped(old):
                await wait_gone(old)  # found stuck, killed through the master
                # the replacement boots in the background: poll health, bounded
                while True:
                    health = _ok(await client.call_tool("gateway_health", {}))
                    after = health["transport"]["carriers"]["plain"]
                    if after["agent_alive"] and after["agent_pid"] not in (None, old):
                        break
                    await anyio.sleep(0.05)
    assert before["agents_stuck"] == 0
    assert after["agents_stuck"] == 1
    assert after["agent_pid"] != old
    assert after["channels_started"] == 2
    assert after["agent_build"] == before["agent_build"]
