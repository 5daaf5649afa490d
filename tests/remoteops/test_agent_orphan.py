"""No orphan agent: when the gateway process is killed with -9, its agent on the target exits by itself
(its stdin closes). The gateway runs as a real subprocess over HTTP; the target is the real sshd (this
machine, so the agent's pid is checked directly)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.gateway_proc import run_gateway
from tests.fixtures.procs import processes_mentioning, wait_gone
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd, pytest.mark.slow]


@pytest.fixture
def control_dir() -> Iterator[Path]:
    """A short private control directory; every process still mentioning it is killed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rogo-", dir="/tmp"))
    try:
        yield path
    finally:
        for pid in processes_mentioning(str(path)):  # the master the killed gateway left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)


async def test_the_agent_exits_when_the_gateway_is_killed_with_sigkill(
    sshd: SshdInstance, tmp_path: Path, control_dir: Path
) -> None:
    config = {
        "transport": {
            "ssh_config_file": str(sshd.ssh_config),
            "control_dir": str(control_dir),
            "carrier": "agent",  # the first call waits for the agent (auto would run it over ssh)
        },
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
    }
    with run_gateway(tmp_path, config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
        async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
            with anyio.fail_after(60):
                result = await client.call_tool("remote_exec", {"target": "plain", "argv": ["echo", "hi"]})
                health = await client.call_tool("gateway_health", {})
        assert result.is_error is not True, result
        assert (result.structured_content or {})["stdout"] == "hi\n"
        carrier = (health.structured_content or {})["transport"]["carriers"]["plain"]
        assert carrier["carrier"] == "agent"
        agent = int(carrier["agent_pid"])
        assert (await anyio.Path(f"/proc/{agent}").stat()).st_uid == pwd.getpwnam("ro-plain").pw_uid
        gw.proc.kill()
        await anyio.to_thread.run_sync(gw.proc.wait, 10)
        await wait_gone(agent)  # pidfd: the agent on the target exits on its own (bounded, 15 s)
    assert gw.exit_code == -signal.SIGKILL
