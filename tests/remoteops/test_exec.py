"""Exec over the real sshd: results, exit codes, stdin, caps, cwd/env, time limits, policy."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any

import anyio
import pytest

from remoteops import PolicyDenied, RemoteOps
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.conftest import OpsFactory

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]


@pytest.fixture(params=["agent", "ssh"])
def carrier_ops(request: pytest.FixtureRequest, ops_factory: OpsFactory) -> OpsFactory:
    """``ops_factory`` on one carrier: every behaviour below holds on both."""

    def factory(**overrides: Any) -> Any:
        return ops_factory(**{"carrier": request.param, **overrides})

    return factory


async def test_remote_exit_255_is_a_normal_result_with_exit_code_255(carrier_ops: OpsFactory) -> None:
    async with carrier_ops() as ops:
        result = await ops.run("plain", ["sh", "-c", "echo out; echo err >&2; exit 255"])
    assert result.exit_code == 255
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert not result.timed_out


async def test_nonzero_exit_and_shell_mode_share_the_renderer(carrier_ops: OpsFactory) -> None:
    async with carrier_ops() as ops:
        script = "printf '%s' \"$0\"; exit 3"
        result = await ops.run("plain", shell=script)
    assert result.exit_code == 3
    assert result.stdout == "sh"


async def test_stdin_payload_is_delivered_byte_exactly(carrier_ops: OpsFactory) -> None:
    payload = bytes(range(256)) * 4096 + b"\x00tail\r\n"  # ~1 MiB, every byte value, NUL and CRLF
    async with carrier_ops() as ops:
        result = await ops.run("plain", ["sha256sum"], stdin=payload)
    digest = hashlib.sha256(payload).hexdigest()
    assert result.exit_code == 0
    assert result.stdout.split()[0] == digest


async def test_output_caps_keep_head_and_tail_and_count_dropped_bytes(carrier_ops: OpsFactory) -> None:
    cap = 8192
    script = (
        "head -c 20000 /dev/zero | tr '\\0' a; printf HEAD >&2; head -c 30000 /dev/zero >&2; printf TAIL >&2"
    )
    async with carrier_ops(output_cap_bytes=cap) as ops:
        result = await ops.run("plain", ["sh", "-c", "printf START; " + script + "; printf END"])
    assert result.stdout_truncated
    assert result.stdout.startswith("STARTaaa")
    assert result.stdout.endswith("aaaEND")
    assert len(result.stdout) == cap
    assert result.stdout_dropped_bytes == len("START") + 20000 + len("END") - cap
    assert result.stderr_truncated
    assert result.stderr.startswith("HEAD\0")
    assert result.stderr.endswith("\0TAIL")
    assert len(result.stderr) == cap
    assert result.stderr_dropped_bytes == 4 + 30000 + 4 - cap


async def test_cwd_and_env_are_applied_literally(carrier_ops: OpsFactory) -> None:
    weird = "a b $(id) `x` 'q' \"d\"\nline2"
    async with carrier_ops() as ops:
        result = await ops.run(
            "plain", ["sh", "-c", 'pwd; printf "%s" "$ROG_VALUE"'], cwd="/usr/share", env={"ROG_VALUE": weird}
        )
        with pytest.raises(ValueError, match="environment variable name"):
            await ops.run("plain", ["true"], env={"BAD-NAME": "x"})
    assert result.exit_code == 0
    assert result.stdout == "/usr/share\n" + weird


async def test_missing_cwd_is_a_normal_nonzero_result(carrier_ops: OpsFactory) -> None:
    async with carrier_ops() as ops:
        result = await ops.run("plain", ["true"], cwd="/nonexistent/rog")
    assert result.exit_code not in (0, None)


async def test_timed_out_command_is_gone_from_the_target_process_table(carrier_ops: OpsFactory) -> None:
    marker = f"rogmark-{uuid.uuid4().hex}"
    async with carrier_ops() as ops:
        with anyio.fail_after(20):
            result = await ops.run("plain", ["sh", "-c", "sleep 37.5; true", marker], timeout_s=1)
        assert result.timed_out
        assert result.remote_killed
        check = await ops.run("plain", ["sh", "-c", f"ps -eo args | grep -c '[{marker[0]}]{marker[1:]}'"])
    assert check.stdout.strip() == "0"
    assert (await anyio.run_process(["pgrep", "-f", marker], check=False)).returncode == 1


async def test_cancelled_run_stops_the_remote_command(carrier_ops: OpsFactory) -> None:
    marker = f"rogcancel-{uuid.uuid4().hex}"
    async with carrier_ops() as ops:
        await ops.run("plain", ["true"])  # master up, so the cancellation hits the command itself
        with anyio.move_on_after(1):
            await ops.run("plain", ["sh", "-c", "sleep 41.5; true", marker], timeout_s=60)
    assert (await anyio.run_process(["pgrep", "-f", marker], check=False)).returncode == 1


async def test_policy_denied_for_an_unconfigured_target_starts_no_process(
    ops_factory: OpsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[object] = []

    async def no_process(*args: object, **kwargs: object) -> None:
        spawned.append(args)
        raise AssertionError("a process was started")

    async with ops_factory() as ops:
        monkeypatch.setattr(anyio, "open_process", no_process)
        with pytest.raises(PolicyDenied) as info:
            await ops.run("not-configured", ["true"])
        with pytest.raises(PolicyDenied):
            await ops.capabilities("not-configured")
        monkeypatch.undo()
        names = tuple(sorted(t.name for t in await ops.list_targets()))
    assert info.value.target == "not-configured"
    assert info.value.reason == "not_configured"
    assert info.value.configured == names  # the error lists the targets that are configured
    assert names
    assert spawned == []


async def test_fifty_parallel_runs_queue_and_all_succeed(carrier_ops: OpsFactory) -> None:
    results: list[int | None] = []

    async def one(ops: RemoteOps, i: int) -> None:
        result = await ops.run("plain", ["sh", "-c", f"echo {i}; sleep 0.05"])
        assert result.stdout == f"{i}\n"
        results.append(result.exit_code)

    async with carrier_ops() as ops:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, ops, i)
        stats = ops.stats()
    assert results == [0] * 50
    assert stats.masters_created == 1
    assert stats.fallbacks == 0
    assert stats.failures == {}


async def test_closing_remoteops_leaves_no_child_processes_behind(
    carrier_ops: OpsFactory, sshd: SshdInstance
) -> None:
    children = anyio.Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    # compared with the children before (the session's sshd, and whatever an earlier test in this process
    # may have left), not with a fixed list: only what this RemoteOps started must be gone
    before = sorted(int(pid) for pid in (await children.read_text()).split())
    assert sshd.pid in before
    async with carrier_ops() as ops:
        for _ in range(3):
            await ops.run("plain", ["true"])
        during = sorted(int(pid) for pid in (await children.read_text()).split())
        assert set(during) - set(before)  # the master is our supervised child
    assert sorted(int(pid) for pid in (await children.read_text()).split()) == before
