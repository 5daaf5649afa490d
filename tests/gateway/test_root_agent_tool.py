"""``remote_root_exec`` through MCP with ``[root] agent = true``: the gateway's root commands are carried by
one root agent on the target (real sshd, real sudo), and closing the gateway ends it."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from mcp import Client

from tests.fixtures.procs import pid_runs, wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]


async def _root_exec(client: Client, argv: list[str]) -> types.CallToolResult:
    with anyio.fail_after(60):
        return await client.call_tool("remote_root_exec", {"target": "sudo", "argv": argv})


async def test_remote_root_exec_with_the_root_agent_runs_on_one_uid_0_agent_that_ends_with_the_gateway(
    sshd: SshdInstance, gateway_client: ClientFactory
) -> None:
    settings = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "sudo", "host": sshd.alias("sudo")}],
        "root": {"targets": ["sudo"], "agent": True},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
    }
    async with gateway_client(**settings) as (client, rt):
        results = [
            await _root_exec(
                client, ["sh", "-c", 'id -u; read -r _ _ _ agent _ < /proc/$PPID/stat; echo "$agent"']
            )
            for _ in range(3)
        ]
        state = rt.remote.stats().carriers["sudo"]
    root_agent = state.root_agent_pid
    assert root_agent is not None
    assert state.root_carrier == "agent"
    assert state.root_channels_started == 1
    for result in results:
        assert not result.is_error, result
        out = result.structured_content
        assert out is not None
        assert out["stdout"] == f"0\n{root_agent}\n"
        assert out["privilege"]["provider"] == "sudo_nopasswd"
    await wait_gone(root_agent)  # the gateway closed it; it exits after killing what it started
    assert not pid_runs(root_agent)
