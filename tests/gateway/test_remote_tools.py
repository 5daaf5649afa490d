"""The remote tools through MCP, against the real OpenSSH sshd: results, error codes, policy, audit."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from gateway._dispatch import error_payload
from tests.fixtures.procs import processes_mentioning
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory, read_audit
from tests.remoteops.conftest import wait_for_line
from tests.remoteops.task_helpers import Gate

SECRET = "Planted-Secret-For-Exec-0x5eed"


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A short directory the target's plain user can write to (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogx-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _targets(sshd: SshdInstance) -> dict[str, Any]:
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [
            {"name": "plain", "host": sshd.alias("plain")},
            {"name": "badhostkey", "host": sshd.alias("badhostkey")},
            {"name": "wrongkey", "host": sshd.alias("wrongkey")},
            {"name": "closed", "host": sshd.alias("closed")},
        ],
    }


def _err(result: Any) -> dict[str, Any]:
    assert result.is_error is True, result
    error = error_payload(result)
    assert error is not None, result
    return error


@pytest.mark.anyio
async def test_remote_exec_returns_separate_streams_and_exit_code(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_targets(sshd)) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(
            "remote_exec", {"target": "plain", "shell": "echo out; echo err >&2; exit 3"}
        )
        assert result.is_error is not True
        out = result.structured_content
        jsonschema.validate(out, tools["remote_exec"].output_schema)
        assert (out["exit_code"], out["stdout"], out["stderr"]) == (3, "out\n", "err\n")
        assert out["timed_out"] is False
        assert "exit 3" in result.content[0].text


@pytest.mark.anyio
async def test_remote_exec_argv_stdin_env_and_cwd_arrive_literally(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_targets(sshd)) as (client, _):
        result = await client.call_tool(
            "remote_exec",
            {
                "target": "plain",
                "argv": ["sh", "-c", 'printf "%s|%s|" "$GREETING" "$(pwd)"; cat', "ignored"],
                "env": {"GREETING": "it's $(not) run; `x`"},
                "cwd": "/tmp",
                "stdin": base64.b64encode(b"\x00bin\xffary").decode(),
                "stdin_encoding": "base64",
            },
        )
        out = result.structured_content
        assert out["exit_code"] == 0
        assert out["stdout"].startswith("it's $(not) run; `x`|/tmp|")


@pytest.mark.anyio
async def test_an_unconfigured_target_is_policy_denied(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_targets(sshd)) as (client, rt):
        err = _err(await client.call_tool("remote_exec", {"target": "sshd-root", "argv": ["id"]}))
        assert err["code"] == "policy_denied"
        assert rt.remote.stats().runs == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("target", "code"),
    [("badhostkey", "host_key_error"), ("wrongkey", "auth_error"), ("closed", "connect_error")],
)
@pytest.mark.parametrize("carrier", ["auto", "agent"])
async def test_transport_failures_map_to_their_error_codes(
    gateway_client: ClientFactory, sshd: SshdInstance, target: str, code: str, carrier: str
) -> None:
    config = _targets(sshd)
    config["transport"]["carrier"] = carrier
    async with gateway_client(**config) as (client, _):
        err = _err(await client.call_tool("remote_exec", {"target": target, "argv": ["true"]}))
        assert err["code"] == code
        assert err["details"]["target"] == target
        assert err["retryable"] is (code == "connect_error")


@pytest.mark.anyio
async def test_bad_exec_arguments_are_validation_errors(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_targets(sshd)) as (client, _):
        for args in (
            {"target": "plain"},
            {"target": "plain", "argv": ["true"], "shell": "true"},
            {"target": "plain", "argv": ["env"], "env": {"BAD-NAME": "x"}},
            {"target": "plain", "argv": ["cat"], "stdin": "!!", "stdin_encoding": "base64"},
            {"target": "plain", "argv": ["true"], "timeout_s": 999999},
            {"target": "plain", "argv": []},
        ):
            assert _err(await client.call_tool("remote_exec", args))["code"] == "validation_error", args


@pytest.mark.anyio
async def test_a_timed_out_command_is_reported_and_stopped(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_targets(sshd)) as (client, _):
        result = await client.call_tool(
            "remote_exec", {"target": "plain", "argv": ["sleep", "30"], "timeout_s": 1}
        )
        out = result.structured_content
        assert result.is_error is not True
        assert out["timed_out"] is True
        assert out["remote_killed"] is True


@pytest.mark.anyio
async def test_target_tools_describe_the_target(gateway_client: ClientFactory, sshd: SshdInstance) -> None:
    async with gateway_client(**_targets(sshd)) as (client, _):
        listed = (await client.call_tool("target_list", {})).structured_content
        plain = next(t for t in listed["targets"] if t["name"] == "plain")
        assert plain["identity"]["user"] == sshd.users["plain"]
        assert plain["identity"]["port"] == sshd.port
        caps = (await client.call_tool("target_capabilities", {"target": "plain"})).structured_content
        assert caps["user"] == sshd.users["plain"]
        assert caps["tools"]["sh" if "sh" in caps["tools"] else "timeout"] is True
        diag = (await client.call_tool("target_diagnose", {"target": "plain"})).structured_content
        assert diag["identity"]["hostname"] == "127.0.0.1"
        assert diag["disks"]


@pytest.mark.anyio
async def test_secrets_in_stdin_and_env_never_reach_the_audit_file_or_the_log(
    gateway_client: ClientFactory, sshd: SshdInstance, capfd: pytest.CaptureFixture[str]
) -> None:
    async with gateway_client(**_targets(sshd)) as (client, rt):
        result = await client.call_tool(
            "remote_exec",
            {
                "target": "plain",
                "argv": ["sh", "-c", "cat >/dev/null; echo done"],
                "stdin": SECRET,
                "env": {"DB_PASSWORD": SECRET},
            },
        )
        assert result.structured_content["stdout"] == "done\n"
        audit = await read_audit(rt)
        health = await client.call_tool("gateway_health", {})
    record = json.loads(audit.splitlines()[0])
    assert record["tool"] == "remote_exec"
    assert record["target"] == "plain"
    assert record["toolset"] == "execute"
    assert record["arguments"]["stdin"]["len"] == len(SECRET)
    assert SECRET not in audit
    assert SECRET not in json.dumps(health.structured_content)
    captured = capfd.readouterr()
    assert SECRET not in captured.out + captured.err


def _cmdlines_containing(needle: bytes) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # the process ended while we looked
            continue
        if needle in cmdline:
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


@pytest.mark.anyio
async def test_a_stdin_secret_is_in_no_process_argv_while_the_command_runs(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    # The target is this machine, so /proc shows both ends: the local ssh client and the remote command.
    # The command holds on a gate until the scan is done (a fixed ``sleep 1`` let a test delayed by a loaded
    # machine scan after it had ended, and miss it).
    marker = shared_tmp / "running"
    gate = Gate(shared_tmp, "gate")
    try:
        async with gateway_client(**_targets(sshd)) as (client, _), anyio.create_task_group() as tg:
            results: list[Any] = []

            async def run() -> None:
                script = f"touch {marker}; read -r line; {gate.shell()}; echo ${{#line}}"
                results.append(
                    await client.call_tool(
                        "remote_exec",
                        {"target": "plain", "argv": ["sh", "-c", script], "stdin": SECRET + "\n"},
                    )
                )

            tg.start_soon(run)
            try:
                with anyio.fail_after(20):
                    while not marker.exists():  # noqa: ASYNC110 - the remote command signals through a file
                        await anyio.sleep(0.02)
                running = _cmdlines_containing(str(marker).encode())
                leaked = _cmdlines_containing(SECRET.encode())
            finally:
                gate.release()  # whatever happened: the command ends, and the call with it
    finally:
        gate.close()
    assert running, "the scan must see the running remote command"
    assert leaked == []
    assert results[0].structured_content["stdout"] == f"{len(SECRET)}\n"


@pytest.mark.anyio
async def test_fifty_parallel_remote_exec_calls_through_mcp_all_succeed(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    # sshd allows 10 sessions per connection; the per-target channel cap makes the burst queue, not fail.
    async with gateway_client(**_targets(sshd)) as (client, rt):
        results: dict[int, Any] = {}

        async def one(i: int) -> None:
            results[i] = await client.call_tool("remote_exec", {"target": "plain", "argv": ["echo", str(i)]})

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i)
        stats = rt.remote.stats()
    assert sorted(results) == list(range(50))
    for i, result in results.items():
        assert result.is_error is not True, result
        assert result.structured_content["stdout"] == f"{i}\n"
    assert stats.masters_created == 1  # one master, single-flight, for all fifty


@pytest.mark.anyio
async def test_a_master_killed_mid_command_is_transport_lost_and_not_rerun(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    marker, counter, pidfile = shared_tmp / "started", shared_tmp / "runs", shared_tmp / "pid"
    script = f"echo run >> {counter}; echo $$ > {pidfile}; touch {marker}; exec sleep 30"
    async with gateway_client(**_targets(sshd)) as (client, rt), anyio.create_task_group() as tg:
        results: list[Any] = []

        async def run() -> None:
            results.append(await client.call_tool("remote_exec", {"target": "plain", "shell": script}))

        tg.start_soon(run)
        with anyio.fail_after(20):
            while not marker.exists():  # noqa: ASYNC110 - the remote command signals through a file
                await anyio.sleep(0.02)
        plain = next(t for t in await rt.remote.list_targets() if t.name == "plain")
        assert plain.multiplex.master_pid is not None
        os.kill(plain.multiplex.master_pid, signal.SIGKILL)
    err = _err(results[0])
    assert err["code"] == "transport_lost"
    assert err["retryable"] is False
    assert err["details"]["may_have_run"] is True
    assert counter.read_text() == "run\n"  # ran once, never replayed
    with contextlib.suppress(ProcessLookupError):  # the orphaned remote sleep (the target is this machine)
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.anyio
@pytest.mark.parametrize("carrier", ["agent", "ssh"])
async def test_a_remote_exec_the_client_cancels_leaves_no_process_on_the_target(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path, carrier: str
) -> None:
    # The target is this machine: its /proc shows the command, the children that left its process group
    # (setsid) and a double-forked one, all carrying the marker in their environment.
    marker = f"rogmcpcancel-{uuid.uuid4().hex}"
    fifo = shared_tmp / "started"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    # every process is forked before "started" is written (a foreground sleep after it may not be yet)
    script = 'setsid sleep 331 & (setsid sleep 332 &); sleep 333 & echo started > "$1"; wait'
    config = _targets(sshd)
    config["transport"]["carrier"] = carrier
    args = {"target": "plain", "argv": ["sh", "-c", script, "x", str(fifo)], "env": {"ROG_TEST_MARK": marker}}
    try:
        async with gateway_client(**config) as (client, rt):
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:

                    async def call() -> None:
                        await client.call_tool("remote_exec", args)

                    tg.start_soon(call)
                    assert await wait_for_line(fifo) == "started\n"
                    # a process caught inside execve shows an empty environ for a moment: look again (bounded)
                    running = processes_mentioning(marker, environ=True)
                    with anyio.move_on_after(10):
                        while len(running) < 4:
                            await anyio.sleep(0.02)
                            running = processes_mentioning(marker, environ=True)
                    tg.cancel_scope.cancel()  # the client abandons its request: notifications/cancelled
                while processes_mentioning(marker, environ=True):  # noqa: ASYNC110 - the gateway kills them
                    await anyio.sleep(0.05)
            health = await client.call_tool("gateway_health", {})  # the gateway still answers
            state = rt.remote.stats().carriers["plain"]
    finally:
        for pid in processes_mentioning(marker, environ=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert len(running) >= 4  # sh and its three sleeps were seen running before the cancel
    assert health.is_error is not True
    assert state.carrier == carrier
