"""The agent's failure modes seen through the MCP tools against the real OpenSSH sshd (the target is this
machine, logins as ro-plain): a runaway grep ends as ``timeout`` and leaves the target usable, a
3,000-deep tree is deleted, a process that left the call's session and environment is still killed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway._dispatch import error_payload
from tests.fixtures.procs import wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

_S = f"500.{os.getpid()}0"  # sleeps carrying this process's pid: the checks find this test's only
_DEEP = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(int(sys.argv[2])):
    os.mkdir("d", dir_fd=fd)
    down = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = down
os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A short directory the target's plain user can write to."""
    path = Path(tempfile.mkdtemp(prefix="roga-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _config(sshd: SshdInstance, **transport: Any) -> dict[str, Any]:
    return {
        "transport": {
            "ssh_config_file": str(sshd.ssh_config),
            "control_dir": str(sshd.control_dir),
            "carrier": "agent",
            **transport,
        },
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }


def _sleepers(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if f"sleep\0{tag}".encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                if int(stat[stat.rfind(b")") + 2 :].split()[1]) == pid:
                    found.append(int(entry))
    return found


async def test_a_runaway_remote_grep_is_a_timeout_and_the_target_keeps_answering(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    (shared_tmp / "evil.txt").write_bytes(b"a" * 40 + b"!\n")
    async with gateway_client(**_config(sshd, exec_timeout_default_s=4)) as (client, _):
        with anyio.fail_after(60):
            grep = await client.call_tool(
                "remote_grep", {"target": "plain", "path": str(shared_tmp), "pattern": "^(a+)+$"}
            )
            stat = await client.call_tool("remote_stat", {"target": "plain", "path": str(shared_tmp)})
            echo = await client.call_tool("remote_exec", {"target": "plain", "argv": ["echo", "hi"]})
            health = await client.call_tool("gateway_health", {})
    assert grep.is_error is True
    error = error_payload(grep)
    assert error is not None
    assert error["code"] == "timeout"
    assert stat.is_error is not True, stat
    assert (echo.structured_content or {})["stdout"] == "hi\n"
    agent = int((health.structured_content or {})["transport"]["carriers"]["plain"]["agent_pid"])
    for worker in _children(agent):  # the grep's worker was killed (the agent may still be reaping)
        await wait_gone(worker)


async def test_remote_delete_removes_a_3000_deep_tree(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    top = shared_tmp / "deep"
    try:
        async with gateway_client(**_config(sshd)) as (client, _):
            with anyio.fail_after(120):
                made = await client.call_tool(
                    "remote_exec",
                    {"target": "plain", "argv": ["mkdir", str(top)]},
                )
                built = await client.call_tool(
                    "remote_exec",
                    {"target": "plain", "argv": ["python3", "-c", _DEEP, str(top), "3000"]},
                )
                deleted = await client.call_tool(
                    "remote_delete", {"target": "plain", "path": str(top), "recursive": True}
                )
    finally:
        with anyio.fail_after(60):
            await anyio.run_process(["rm", "-rf", str(top)], check=False)
    assert (made.structured_content or {})["exit_code"] == 0
    assert (built.structured_content or {})["exit_code"] == 0, built
    assert deleted.is_error is not True, deleted
    assert not top.exists()


async def test_a_process_that_left_the_session_and_the_environment_is_killed_at_the_time_limit(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    script = f"setsid env -i sh -c 'exec sleep {_S}1' & sleep {_S}2"
    try:
        async with gateway_client(**_config(sshd)) as (client, _):
            with anyio.fail_after(60):
                result = await client.call_tool(
                    "remote_exec", {"target": "plain", "argv": ["sh", "-c", script], "timeout_s": 3}
                )
            left = _sleepers(f"{_S}1")
    finally:
        for pid in _sleepers(_S):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    out = result.structured_content or {}
    assert (out["timed_out"], out["remote_killed"]) == (True, True)
    assert left == []
