"""MCP tasks against the real gateway subprocess over streamable HTTP and the real sshd.

The requester is the Python SDK (2.3) with :class:`acceptance.harness.mcp_tasks.TasksExtension`: it declares
``io.modelcontextprotocol/tasks`` on every request (2026-07-28) and receives the ``resultType: "task"``
handle. A client without the extension is the plain SDK client, in both eras.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from acceptance.harness.mcp_tasks import (
    CreatedTask,
    TaskIdParams,
    TasksExtension,
    TasksGet,
    cancel,
    get,
    poll,
    update,
)
from acceptance.harness.raw_mcp import ACCEPT, INIT, INITIALIZED, session_headers, sse_data
from gateway._runtime import Runtime
from gateway.approvals.hub import Approver
from gateway.config import Settings
from gateway.mcptasks.wire import MISSING_CAPABILITY
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.fixtures.browser import chromium, enter_password
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.oauth_server import run_auth_server
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.task_helpers import Gate, marked_processes, remote_root
from tests.upstream.conftest import fault_command

pytestmark = [pytest.mark.sshd, pytest.mark.anyio, pytest.mark.slow]

COMMAND = "echo out-line; echo err-line >&2; exit 7"
RESOURCE = "https://gateway.example.test/mcp"


@pytest.fixture
def root() -> Iterator[Path]:
    with remote_root() as path:
        yield path


def config(sshd: SshdInstance, root: Path, **extra: Any) -> dict[str, Any]:
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "tasks": {"remote_dir": str(root)},
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
        **extra,
    }


@pytest.fixture
def gateway(sshd: SshdInstance, root: Path, tmp_path: Path) -> Iterator[GatewayProcess]:
    with run_gateway(tmp_path, config(sshd, root)) as gw:
        yield gw


@asynccontextmanager
async def client(
    gw: GatewayProcess, *, tasks: bool, mode: str = "auto", headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=headers or gw.headers(), timeout=httpx2.Timeout(30))
    extensions = [TasksExtension()] if tasks else None
    async with (
        http,
        Client(streamable_http_client(gw.url, http_client=http), mode=mode, extensions=extensions) as c,
    ):  # type: ignore[arg-type]
        yield c


def exec_args(shell: str, timeout_s: float = 120) -> dict[str, Any]:
    return {"target": "plain", "shell": shell, "timeout_s": timeout_s}


async def test_a_long_remote_exec_becomes_a_task_whose_result_matches_a_direct_call(
    gateway: GatewayProcess,
) -> None:
    with anyio.fail_after(90):
        async with client(gateway, tasks=True) as c:
            created = await c.session.call_tool("remote_exec", exec_args(COMMAND), allow_claimed=True)
            assert isinstance(created, CreatedTask)
            seen: list[dict[str, Any]] = []
            done = await poll(c, created.task_id, seen=seen)
            short = await c.call_tool("remote_exec", exec_args(COMMAND, timeout_s=10))  # under the threshold
        async with client(gateway, tasks=False) as plain:
            direct = await plain.call_tool("remote_exec", exec_args(COMMAND))
    assert created.status == "working"
    assert created.task_id.startswith("mt-")
    assert len(created.task_id) == 35  # 128 random bits in hex
    assert done["status"] == "completed", done
    task_result = done["result"]["structuredContent"]
    for result in (direct.structured_content, short.structured_content):
        assert result is not None
        for key in ("target", "exit_code", "signal", "stdout", "stderr", "timed_out"):
            assert task_result[key] == result[key], key
    assert (task_result["exit_code"], task_result["stdout"], task_result["stderr"]) == (
        7,
        "out-line\n",
        "err-line\n",
    )
    assert done["result"]["isError"] is False
    assert "exit 7" in done["statusMessage"]


@pytest.fixture
def gate() -> Iterator[Gate]:
    directory = Path(tempfile.mkdtemp(prefix="rogmt-", dir="/tmp"))
    directory.chmod(0o777)
    g = Gate(directory, "gate")
    try:
        yield g
    finally:
        g.close()
        shutil.rmtree(directory, ignore_errors=True)


async def _status(gw: GatewayProcess, task_id: str) -> dict[str, Any]:
    async with client(gw, tasks=True) as c:
        return await get(c, task_id)


async def test_a_task_outlives_a_client_drop_and_a_gateway_sigkill_and_completes_with_the_real_exit_code(
    sshd: SshdInstance, root: Path, tmp_path: Path, gate: Gate
) -> None:
    count = gate.path.with_name("count")
    script = f"echo ran >> {count}; echo started; {gate.shell()}; echo finished; exit 42"
    cfg = config(sshd, root)
    with anyio.fail_after(150):
        with run_gateway(tmp_path, cfg) as first:
            async with client(first, tasks=True) as c:  # this client goes away with the call still running
                created = await c.session.call_tool("remote_exec", exec_args(script, 300), allow_claimed=True)
                assert isinstance(created, CreatedTask)
                other_gate = Gate(
                    gate.path.parent, "other"
                )  # one gate per reader: a release wakes exactly one
                started_other = {"target": "plain", "shell": other_gate.shell()}
                other = (await c.call_tool("task_start", started_other)).structured_content
                assert other is not None
                wait = {"task_id": other["id"], "timeout_s": 300}
                ongoing = await c.session.call_tool("task_wait", wait, allow_claimed=True)
            assert isinstance(ongoing, CreatedTask)  # task_wait is always a task (local work)
            after_drop = await _status(first, created.task_id)
            first.proc.kill()  # SIGKILL: no shutdown code runs
            await anyio.to_thread.run_sync(first.proc.wait, 30)
        assert first.exit_code == -9
        await anyio.Path(tmp_path / "ready.json").unlink()
        with run_gateway(tmp_path, cfg) as second:
            after_restart = await _status(second, created.task_id)
            local_after_restart = await _status(second, ongoing.task_id)
            gate.release()
            other_gate.release()
            async with client(second, tasks=True) as c:
                done = await poll(c, created.task_id)
                health = (await c.call_tool("gateway_health", {})).structured_content
    assert after_drop["status"] == "working"
    assert after_restart["status"] == "working"
    assert (done["status"], done["result"]["structuredContent"]["exit_code"]) == ("completed", 42)
    assert done["result"]["structuredContent"]["stdout"] == "started\nfinished\n"
    assert await anyio.Path(count).read_text() == "ran\n"  # the command ran exactly once
    assert local_after_restart["status"] == "failed"  # never claimed completed
    assert "restarted" in local_after_restart["statusMessage"]
    assert local_after_restart["error"]["code"] == types.INTERNAL_ERROR
    other_gate.close()
    assert health is not None
    assert health["mcp_tasks"]["by_status"] == {"completed": 1, "failed": 1}
    assert health["mcp_tasks"]["durable"] == 1


async def test_tasks_cancel_kills_the_remote_command_on_the_target_and_the_task_ends_cancelled(
    gateway: GatewayProcess, root: Path, gate: Gate
) -> None:
    script = f"echo started; {gate.shell()}; echo never"
    with anyio.fail_after(90):
        async with client(gateway, tasks=True) as c:
            created = await c.session.call_tool("remote_exec", exec_args(script, 300), allow_claimed=True)
            assert isinstance(created, CreatedTask)
            progress = await get(c, created.task_id)
            while "bytes of output" not in progress.get("statusMessage", ""):  # bounded above
                await anyio.sleep(0.1)
                progress = await get(c, created.task_id)
            while not marked_processes(root):  # noqa: ASYNC110 - another process's state (bounded above)
                await anyio.sleep(0.05)
            running = marked_processes(root)
            await cancel(c, created.task_id)
            left = marked_processes(root)  # the cancel returns once the target confirmed the kill
            detail = await get(c, created.task_id)
    assert running
    assert left == []
    assert detail["status"] == "cancelled", detail
    assert "confirmed on the target" in detail["statusMessage"]
    assert "result" not in detail
    assert progress["status"] == "working"
    assert progress["statusMessage"] == "running on plain: 8 bytes of output so far"  # "started\n"
    audit = [json.loads(line) for line in (gateway.state_dir / "audit.jsonl").read_text().splitlines()]
    events = [(r["event"], r["status"]) for r in audit if r.get("task_id") == created.task_id]
    assert events[0] == ("mcp_task_created", "working")
    assert ("mcp_task_polled", "working") in events
    assert ("mcp_task_cancelled", "working") in events  # asked while it ran
    assert ("mcp_task_completed", "cancelled") in events


async def test_a_client_without_the_extension_sees_no_change_in_either_era(
    gateway: GatewayProcess,
) -> None:
    specs = {spec.name: spec for spec in all_specs()}
    with anyio.fail_after(90):
        for mode in ("legacy", "auto"):
            async with client(gateway, tasks=False, mode=mode) as plain:
                listed = await plain.list_tools()
                long_call = await plain.call_tool("remote_exec", exec_args("echo plain", 120))
                with pytest.raises(MCPError) as refused:
                    await plain.session.send_request(
                        TasksGet(params=TaskIdParams(task_id="mt-x")), types.EmptyResult
                    )
            for tool in listed.tools:
                assert tool == specs[tool.name].to_mcp(), tool.name  # the pinned catalog, untouched
            assert long_call.structured_content is not None
            assert long_call.structured_content["stdout"] == "plain\n"  # answered inline, as before
            expected = MISSING_CAPABILITY if mode == "auto" else types.INVALID_PARAMS
            assert refused.value.error.code == expected


async def test_another_principal_can_neither_read_nor_cancel_a_task(
    sshd: SshdInstance, root: Path, tmp_path: Path, gate: Gate
) -> None:
    scopes = "remoteops:inspect remoteops:execute remoteops:teardown"
    with run_auth_server(RESOURCE) as idp:
        auth = {
            "mode": "oauth",
            "oauth": {"issuer": idp.issuer, "resource": RESOURCE, "jwks_url": idp.jwks_url, "leeway_s": 5},
        }
        with run_gateway(tmp_path, config(sshd, root, auth=auth)) as gw, anyio.fail_after(90):
            alice = {"Authorization": f"Bearer {idp.issue('alice', scopes)}"}
            bob = {"Authorization": f"Bearer {idp.issue('bob', scopes)}"}
            async with client(gw, tasks=True, headers=alice) as a:
                created = await a.session.call_tool(
                    "remote_exec", exec_args(gate.shell(), 300), allow_claimed=True
                )
                assert isinstance(created, CreatedTask)
                codes = []
                async with client(gw, tasks=True, headers=bob) as b:
                    for attempt in (get, cancel):
                        with pytest.raises(MCPError) as refused:
                            await attempt(b, created.task_id)
                        codes.append(refused.value.error.code)
                still = await get(a, created.task_id)
                gate.release()
                done = await poll(a, created.task_id)
    assert codes == [types.INVALID_PARAMS, types.INVALID_PARAMS]  # "not found", as for an unknown id
    assert still["status"] == "working"  # bob's cancel did nothing
    assert done["status"] == "completed"
    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    events = [
        (r.get("event"), r.get("principal")) for r in audit if str(r.get("event")).startswith("mcp_task")
    ]
    assert ("mcp_task_created", "oauth:alice") in events
    assert ("mcp_task_completed", "oauth:alice") in events
    assert all(who == "oauth:alice" for _, who in events)


async def test_a_relayed_upstream_tool_is_never_made_a_task_even_when_named_in_always(
    sshd: SshdInstance, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "fault").mkdir()
    upstream = {
        "name": "fault",
        "transport": "stdio",
        "command": fault_command("--state-dir", str(tmp_path / "fault"), "--stdio"),
    }
    cfg = config(
        sshd, root, upstreams=[{"connection": upstream}], mcp_tasks={"always": ["echo", "exec_many"]}
    )
    cfg["tools"] = {"toolsets": ["inspect", "execute", "upstream"]}
    with run_gateway(tmp_path, cfg) as gw, anyio.fail_after(60):
        async with client(gw, tasks=True) as c:
            declared = await c.session.call_tool("echo", {"text": "relayed"}, allow_claimed=True)
        async with client(gw, tasks=False) as plain:
            direct = await plain.call_tool("echo", {"text": "relayed"})
    assert isinstance(declared, types.CallToolResult)  # the upstream's answer, not a task handle
    assert declared.structured_content == direct.structured_content == {"text": "relayed"}


async def test_a_password_the_task_needs_is_asked_through_input_required_and_answered_by_tasks_update(
    sshd: SshdInstance, root: Path, tmp_path: Path
) -> None:
    """2026-07-28: the password page's link travels as the task's ``inputRequests`` (a URL elicitation);
    the human types the password on the page, the client answers with ``tasks/update``, the task runs as
    root and completes. The password never passes the MCP client."""
    cfg = config(sshd, root, mcp_tasks={"always": ["remote_root_exec"]})
    cfg["targets"] = [{"name": "pass", "host": sshd.alias("pass")}]
    cfg["root"] = {"targets": ["pass"], "providers": ["sudo_password"]}
    cfg["tools"] = {"toolsets": ["inspect", "execute", "root"]}
    with run_gateway(tmp_path, cfg) as gw, anyio.fail_after(120):
        async with chromium() as browser, client(gw, tasks=True) as c:
            args = {"target": "pass", "argv": ["id", "-u"]}
            created = await c.session.call_tool("remote_root_exec", args, allow_claimed=True)
            assert isinstance(created, CreatedTask)
            asked = await get(c, created.task_id)
            while asked["status"] == "working":  # bounded above
                await anyio.sleep(0.1)
                asked = await get(c, created.task_id)
            [(key, request)] = asked["inputRequests"].items()
            page = await enter_password(browser, request["params"]["url"], sshd.pass_password)
            await update(c, created.task_id, {key: {"action": "accept"}})
            done = await poll(c, created.task_id)
    assert asked["status"] == "input_required"
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "url"
    assert page.after_status == 200
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["stdout"].strip() == "0"
    assert sshd.pass_password not in json.dumps(done)


async def test_the_calls_timeout_stops_the_remote_command_of_a_task_and_says_so(
    sshd: SshdInstance, root: Path, tmp_path: Path
) -> None:
    cfg = config(sshd, root, mcp_tasks={"threshold_s": 1})  # so that a 2 s limit makes a task
    with run_gateway(tmp_path, cfg) as gw, anyio.fail_after(60):
        async with client(gw, tasks=True) as c:
            created = await c.session.call_tool(
                "remote_exec", exec_args("echo before; sleep 300", 2), allow_claimed=True
            )
            assert isinstance(created, CreatedTask)
            done = await poll(c, created.task_id)
            left = marked_processes(root)
    result = done["result"]["structuredContent"]
    assert done["status"] == "completed"
    assert (result["timed_out"], result["remote_killed"], result["stdout"]) == (True, True, "before\n")
    assert done["statusMessage"].startswith("timed out; ")
    assert left == []


async def test_an_upload_is_always_a_task_whose_status_carries_the_bytes_and_a_tool_error_completes_as_one(
    sshd: SshdInstance, root: Path, tmp_path: Path, gate: Gate
) -> None:
    local = gate.path.parent / "local"
    local.mkdir()
    source = local / "payload.bin"
    source.write_bytes(os.urandom(3 * 1024 * 1024))
    destination = gate.path.parent / "uploaded.bin"
    cfg = config(sshd, root, transfers={"local_roots": [str(local)]})
    args = {
        "target": "plain",
        "local_path": str(source),
        "remote_path": str(destination),
        "bwlimit_kib_s": 1024,
    }
    with run_gateway(tmp_path, cfg) as gw, anyio.fail_after(90):
        async with client(gw, tasks=True) as c:
            created = await c.session.call_tool("remote_upload", args, allow_claimed=True)
            assert isinstance(created, CreatedTask)
            seen: list[dict[str, Any]] = []
            done = await poll(c, created.task_id, seen=seen)
            outside = {**args, "local_path": "/etc/hostname", "remote_path": str(gate.path.parent / "x")}
            refused = await c.session.call_tool("remote_upload", outside, allow_claimed=True)
            assert isinstance(refused, CreatedTask)
            refused_done = await poll(c, refused.task_id)
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["bytes_transferred"] >= source.stat().st_size
    assert destination.read_bytes() == source.read_bytes()
    messages = [s.get("statusMessage", "") for s in seen if s["status"] == "working"]
    assert any("bytes" in m or "%" in m for m in messages), messages
    assert refused_done["status"] == "completed"  # a tool error is a completed task with an isError result
    assert refused_done["result"]["isError"] is True
    assert refused_done["result"]["_meta"]["remoteops-gateway/error"]["code"] == "policy_denied"


async def test_a_remote_exec_an_approval_rule_holds_is_not_a_remote_task_and_runs_only_once_approved(
    sshd: SshdInstance, root: Path, tmp_path: Path
) -> None:
    """The approval gate is not skipped by the task path: the call takes the dispatcher's path (on
    2026-07-28 the ordinary call, waiting for the human), nothing starts on the target before the decision."""
    approvals = {"rules": [{"name": "exec", "tools": ["remote_exec"]}], "timeout_s": 60}
    approvals |= {"wait_without_elicitation": True}
    cfg = Settings.model_validate(
        {"state_dir": str(tmp_path / "state"), **config(sshd, root, approvals=approvals)}
    )
    answers: list[Any] = []
    async with Runtime(cfg, all_specs()) as rt:
        opened = anyio.Event()
        rt.approvals.add_listener(lambda _: opened.set())
        server = build_server(rt, stdio_principal="test")
        with anyio.fail_after(60):
            async with Client(server, extensions=[TasksExtension()]) as c, anyio.create_task_group() as tg:

                async def call() -> None:
                    args = exec_args("echo approved")
                    answers.append(await c.session.call_tool("remote_exec", args, allow_claimed=True))

                tg.start_soon(call)
                await opened.wait()
                started_before = rt.tasks.list_tasks()[1]
                (approval,) = rt.approvals.pending()
                rt.approvals.decide(
                    approval, Approver("token", "ops"), "approve", "ok", approval.shown.digest
                )
    assert started_before == 0  # no remote task before the human decided
    (answer,) = answers
    assert isinstance(answer, types.CallToolResult)
    assert answer.structured_content is not None
    assert answer.structured_content["stdout"] == "approved\n"
    assert rt.mcp_tasks.health()["total"] == 0


async def test_exec_many_is_always_a_task_whose_status_counts_the_targets_done(
    sshd: SshdInstance, root: Path, tmp_path: Path
) -> None:
    cfg = config(sshd, root)
    cfg["targets"] = [{"name": name, "host": sshd.alias("plain")} for name in ("plain", "plain2")]
    args = {"targets": ["plain", "plain2"], "shell": "sleep 1; echo fleet", "serial": 1}
    with run_gateway(tmp_path, cfg) as gw, anyio.fail_after(90):
        async with client(gw, tasks=True) as c:
            created = await c.session.call_tool("exec_many", args, allow_claimed=True)
            assert isinstance(created, CreatedTask)  # no timeout_s at all: exec_many is in mcp_tasks.always
            seen: list[dict[str, Any]] = []
            done = await poll(c, created.task_id, seen=seen)
    assert done["status"] == "completed", done
    assert done["result"]["isError"] is False
    messages = [s.get("statusMessage", "") for s in seen]
    assert any(m.startswith("1 of 2: plain") for m in messages), messages


def _rpc(http: httpx.Client, gw: GatewayProcess, headers: dict[str, str], method: str, params: Any) -> Any:
    """One JSON-RPC request of a 2025-11-25 session, by hand: its result, or its error object."""
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    answer = sse_data(http.post(gw.url, json=body, headers={**ACCEPT, **headers}))
    return answer.get("result", answer.get("error"))


def test_the_2025_11_25_wire_task_param_tasks_list_result_and_cancel_as_that_spec_gives_them(
    gateway: GatewayProcess,
) -> None:
    init = {**INIT, "params": {**INIT["params"], "capabilities": {"tasks": {"list": {}, "cancel": {}}}}}
    with httpx.Client(timeout=60, headers=gateway.headers()) as http:
        opened = http.post(gateway.url, json=init, headers=ACCEPT)
        capabilities = sse_data(opened)["result"]["capabilities"]
        headers = session_headers(opened)
        http.post(gateway.url, json=INITIALIZED, headers={**ACCEPT, **headers})
        call = {"name": "remote_exec", "arguments": exec_args(COMMAND, 30), "task": {"ttl": 120_000}}
        created = _rpc(http, gateway, headers, "tools/call", call)["task"]
        listed = _rpc(http, gateway, headers, "tasks/list", {})
        result = _rpc(http, gateway, headers, "tasks/result", {"taskId": created["taskId"]})
        got = _rpc(http, gateway, headers, "tasks/get", {"taskId": created["taskId"]})
        late_cancel = _rpc(http, gateway, headers, "tasks/cancel", {"taskId": created["taskId"]})
        forbidden = {"name": "target_list", "arguments": {}, "task": {}}
        not_for_tasks = _rpc(http, gateway, headers, "tools/call", forbidden)
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert (created["status"], created["ttl"], created["pollInterval"]) == ("working", 120_000, 1000)
    assert created["taskId"] in [t["taskId"] for t in listed["tasks"]]
    assert result["structuredContent"]["exit_code"] == 7  # tasks/result waited for the end
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": created["taskId"]}
    assert "resultType" not in result
    assert got["status"] == "completed"
    assert late_cancel["code"] == types.INVALID_PARAMS  # a terminal task cannot be cancelled
    assert not_for_tasks["code"] == types.METHOD_NOT_FOUND  # taskSupport forbidden for this tool
