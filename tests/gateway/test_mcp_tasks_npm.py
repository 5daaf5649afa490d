"""A real requester, the npm package ``@modelcontextprotocol/ext-tasks`` (0.2.2, TypeScript) on the TypeScript
SDK's ``Client`` (2.4.0), drives the real gateway over streamable HTTP against the real sshd: a long
``remote_exec`` becomes a task, is polled to completion, and its result matches a direct call.

Both eras: the TypeScript client's default handshake (2025-11-25), where the package speaks the tasks utility
(``tasks`` capability, ``execution.taskSupport``, the ``task`` param, ``tasks/get`` and ``tasks/result``), and
2026-07-28 pinned, where it speaks the extension (declared per request, ``resultType: "task"``,
``tasks/get`` with the result inline) through the host's raw request path the package asks for. The script
is ``mcp_tasks_requester.mjs`` beside this file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import EXT_TASKS, InstalledTool, ensure_tool
from tests.fixtures.sshd import SshdInstance
from tests.gateway.test_mcp_tasks import client, config, exec_args, gate, root  # noqa: F401 - fixtures
from tests.remoteops.task_helpers import Gate

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.anyio]

SCRIPT = Path(__file__).with_name("mcp_tasks_requester.mjs")
COMMAND = "echo from-npm; sleep 1; echo done >&2; exit 3"


@pytest.fixture(scope="module")
def ext_tasks() -> InstalledTool:
    return ensure_tool(EXT_TASKS)


@pytest.fixture
def gateway(sshd: SshdInstance, root: Path, tmp_path: Path) -> Iterator[GatewayProcess]:  # noqa: F811
    with run_gateway(tmp_path, config(sshd, root)) as gw:
        yield gw


def _request(
    ext_tasks: InstalledTool, gw: GatewayProcess, tool: str, args: dict[str, Any], era: str, *step: str
) -> dict[str, Any]:
    argv = [gw.url, gw.token or "", tool, json.dumps(args), era, *step]
    run = ext_tasks.run_script(SCRIPT, argv, timeout_s=120)
    assert run.returncode == 0, run.describe()
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_the_ext_tasks_requester_runs_a_long_remote_exec_as_a_task_whose_result_matches_a_direct_call(
    ext_tasks: InstalledTool, gateway: GatewayProcess, era: str
) -> None:
    args = exec_args(COMMAND)
    seen = await anyio.to_thread.run_sync(_request, ext_tasks, gateway, "remote_exec", args, era)
    with anyio.fail_after(60):
        async with client(gateway, tasks=False) as plain:
            direct = await plain.call_tool("remote_exec", exec_args(COMMAND))
    assert seen["era"] == era
    assert seen["capabilities"]["execution"] is True
    assert seen["capabilities"]["cancellation"] is True
    # 2025-11-25: listed to a client that declared the tasks capability; 2026-07-28: the server decides
    assert seen["execution"] == ({"taskSupport": "optional"} if era == "legacy" else None)
    assert seen["kind"] == "task"
    assert seen["taskId"].startswith("mt-")
    assert seen["outcome"] == "completed"
    assert seen["statuses"][-1][0] == "completed"
    task_result = seen["result"]["structuredContent"]
    assert direct.structured_content is not None
    for key in ("target", "exit_code", "signal", "stdout", "stderr", "timed_out", "stdout_truncated"):
        assert task_result[key] == direct.structured_content[key], key
    assert (task_result["exit_code"], task_result["stdout"]) == (3, "from-npm\n")
    assert seen["result"]["isError"] is False


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_the_ext_tasks_requester_resumes_its_task_after_a_gateway_sigkill_and_gets_the_real_exit_code(
    ext_tasks: InstalledTool,
    sshd: SshdInstance,
    root: Path,  # noqa: F811 - the fixture imported above
    gate: Gate,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    era: str,
) -> None:
    """The package's own recovery path: ``handoff`` persists the task reference and the process ends;
    the gateway is SIGKILLed and started again on its state; a new process ``resumeTask``s the reference."""
    cfg = config(sshd, root)
    script = f"echo npm-held; {gate.shell()}; exit 11"
    with run_gateway(tmp_path, cfg) as first:
        started = await anyio.to_thread.run_sync(
            _request, ext_tasks, first, "remote_exec", exec_args(script, 300), era, "start"
        )
        first.proc.kill()
        await anyio.to_thread.run_sync(first.proc.wait, 30)
    await anyio.Path(tmp_path / "ready.json").unlink()
    reference = json.dumps(started["reference"])
    with run_gateway(tmp_path, cfg) as second:
        gate.release()
        resumed = await anyio.to_thread.run_sync(
            _request, ext_tasks, second, "remote_exec", {}, era, "resume", reference
        )
    assert started["kind"] == "task"
    assert started["reference"]["generation"] == ("v1" if era == "legacy" else "v2")
    assert resumed["taskId"] == started["reference"]["taskId"]
    assert resumed["outcome"] == "completed"
    result = resumed["result"]["structuredContent"]
    assert (result["exit_code"], result["stdout"]) == (11, "npm-held\n")
