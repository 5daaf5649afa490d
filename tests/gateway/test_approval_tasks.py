"""A rule-matched ``remote_exec`` requested as an MCP task (``io.modelcontextprotocol/tasks``) never starts on
the target without the human: the gateway subprocess over streamable HTTP, the Python SDK requester with the
tasks extension, the real sshd, where the command is checked never to have run."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from acceptance.harness.mcp_tasks import CreatedTask
from gateway._dispatch import error_payload
from tests.fixtures.gateway_proc import run_gateway
from tests.fixtures.sshd import SshdInstance
from tests.gateway.test_mcp_tasks import client, config, exec_args
from tests.remoteops.task_helpers import remote_root

pytestmark = [pytest.mark.sshd, pytest.mark.anyio, pytest.mark.slow]


async def test_a_gated_remote_exec_asked_as_a_task_waits_for_the_human_and_never_starts_alone(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    marker = Path(f"/tmp/rog-approval-task-{uuid.uuid4().hex[:10]}")  # the target is this machine
    rules = [{"name": "exec on plain", "tools": ["remote_exec"], "targets": ["pl*"]}]
    with remote_root() as root, run_gateway(tmp_path, config(sshd, root, approvals={"rules": rules})) as gw:
        with anyio.fail_after(90):
            async with client(gw, tasks=True) as c:
                answer = await c.session.call_tool(
                    "remote_exec", exec_args(f"touch {marker}"), allow_claimed=True
                )
    assert not isinstance(answer, CreatedTask)  # not started on the target as a task
    error = error_payload(answer)  # type: ignore[arg-type]
    assert error is not None
    assert error["code"] == "policy_denied"
    assert error["details"]["reason"] == "approval_required"
    assert not await anyio.Path(marker).exists()
