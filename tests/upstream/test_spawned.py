"""A stdio upstream handed over already running (spawned before the embedding application's imports): the
first connection talks to that very process, a later one spawns its own, and a handed process that does
not match the settings, or is not used, is ended and reaped (real fault-upstream processes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp.client.stdio import get_default_environment

from tests.upstream.conftest import StdioFault
from upstream import SpawnedProcess, Upstream, UpstreamSettings

pytestmark = pytest.mark.anyio


def spawn_like_the_gateway(settings: UpstreamSettings) -> SpawnedProcess:
    """Start the process as ``gateway._early`` does: pipes, stderr on a pipe, a session of its own."""
    env = get_default_environment() | dict(settings.env)
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            settings.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=write_fd,
            env=env,
            start_new_session=True,
            bufsize=0,
        )
    finally:
        os.close(write_fd)
    return SpawnedProcess(process=proc, stderr_fd=read_fd, argv=tuple(settings.command), env=env, cwd=None)


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_first_connection_uses_the_handed_process_and_stops_and_reaps_it_on_exit(
    fault_stdio: StdioFault,
) -> None:
    settings = fault_stdio.settings()
    spawned = spawn_like_the_gateway(settings)
    assert spawned.matches(settings)
    async with Upstream(settings, spawned=spawned) as up:
        with anyio.fail_after(60):
            result = await up.call_tool("echo", {"text": "early"})
        health = up.health()
        assert spawned.process.poll() is None  # the handed launcher itself is the connection's process
    assert result.structured_content == {"text": "early"}
    assert (health.connect_attempts, health.connect_successes) == (1, 1)
    assert spawned.taken
    assert spawned.process.returncode is not None  # stopped and reaped with the connection
    assert group_gone(spawned.process.pid)


async def test_after_the_handed_process_dies_the_reconnect_spawns_a_fresh_one(
    fault_stdio: StdioFault,
) -> None:
    settings = fault_stdio.settings()
    spawned = spawn_like_the_gateway(settings)
    async with Upstream(settings, spawned=spawned) as up:
        with anyio.fail_after(60):
            await up.call_tool("echo", {"text": "one"})
            first_server = fault_stdio.pid()
            spawned.process.kill()
            await up.wait_for(lambda h: h.connect_successes >= 2 and h.state == "connected")
            result = await up.call_tool("echo", {"text": "two"})
    assert result.structured_content == {"text": "two"}
    assert fault_stdio.pid() != first_server
    assert spawned.process.returncode is not None


@pytest.mark.parametrize("change", ["argv", "env", "cwd"])
def test_a_handed_process_that_the_settings_would_not_have_spawned_does_not_match(
    fault_stdio: StdioFault, tmp_path: Path, change: str
) -> None:
    settings = fault_stdio.settings()
    spawned = spawn_like_the_gateway(settings)
    try:
        other = {
            "argv": {"command": [*settings.command, "--extra"]},
            "env": {"env": {"EXTRA": "1"}},
            "cwd": {"cwd": tmp_path},
        }[change]
        assert spawned.matches(settings)
        assert not spawned.matches(settings.model_copy(update=other))
    finally:
        spawned.discard()
    assert spawned.process.returncode is not None
    assert group_gone(spawned.process.pid)
