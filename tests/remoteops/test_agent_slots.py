"""The agent channel and ``max_channels_per_target``: the agent holds one slot of the target's master for its
whole life, however many commands it carries; with a limit of 1, calls of an ``auto`` target wait for the
agent instead of going over ssh (which would wait for the slot the agent holds). Against the real sshd."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from remoteops import RemoteOps, RemoteOpsError, TargetSpec, TransportSettings
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

# every command appends a line, then waits until all of them have: only commands running at once can end
RENDEZVOUS = 'echo x >> "$1"; while [ "$(wc -l < "$1")" -lt "$2" ]; do sleep 0.02; done; echo "$3"'


def _ops(sshd: SshdInstance, *roles: str, **overrides: object) -> RemoteOps:
    settings = TransportSettings.model_validate(
        {"ssh_config_file": sshd.ssh_config, "control_dir": sshd.control_dir, **overrides}
    )
    return RemoteOps(settings, [TargetSpec(name=role, host=sshd.alias(role)) for role in roles])


async def _channels_in_use(ops: RemoteOps, name: str) -> int:
    info = {t.name: t for t in await ops.list_targets()}[name]
    return info.multiplex.channels_in_use


async def test_the_agent_holds_one_slot_however_many_commands_it_carries_at_once(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    count = 12
    log = shared_dir / "arrived"
    outputs: dict[int, str] = {}

    async def one(ops: RemoteOps, i: int) -> None:
        argv = ["sh", "-c", RENDEZVOUS, "x", str(log), str(count), str(i)]
        outputs[i] = (await ops.run("plain", argv, timeout_s=30)).stdout

    # One slot per target: were each command a channel of its own, the first would wait for the others
    # forever (they could not start), and the time limit would end it.
    async with _ops(sshd, "plain", carrier="agent", max_channels_per_target=1) as ops:
        await ops.run("plain", ["true"])
        idle = await _channels_in_use(ops, "plain")
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(count):
                    tg.start_soon(one, ops, i)
        after = await _channels_in_use(ops, "plain")
        state = ops.stats().carriers["plain"]
    assert outputs == {i: f"{i}\n" for i in range(count)}
    assert idle == after == 1  # the idle agent keeps its slot
    assert state.channels_started == 1


async def test_with_one_slot_an_auto_targets_first_call_waits_for_the_agent_instead_of_ssh(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd, "plain", carrier="auto", max_channels_per_target=1) as ops:
        with anyio.fail_after(30):
            first = await ops.exec_raw("plain", ["echo", "one"])
            second = await ops.exec_raw("plain", ["echo", "two"])
        state = ops.stats().carriers["plain"]
    # (with more slots the first call goes over ssh while the agent boots: tests/remoteops/test_agent.py)
    assert first.carrier == "agent"
    assert first.stdout.head == b"one\n"
    assert second.carrier == "agent"
    assert state.channels_started == 1


async def test_with_one_slot_an_auto_target_without_python3_still_falls_back_to_ssh(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd, "nopy", carrier="auto", max_channels_per_target=1) as ops:
        with anyio.fail_after(30):
            first = await ops.exec_raw("nopy", ["id", "-un"])
            second = await ops.exec_raw("nopy", ["true"])
        state = ops.stats().carriers["nopy"]
    assert first.carrier == "ssh"
    assert first.stdout.head == b"ro-nopy\n"
    assert second.carrier == "ssh"
    assert state.carrier == "ssh"
    assert state.reason is not None
    assert state.channels_started == 0


@pytest.mark.slow
async def test_with_one_slot_a_privileged_command_does_not_wait_for_the_idle_agents_slot(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd, "sudo", carrier="agent", max_channels_per_target=1) as ops:
        await ops.run("sudo", ["true"])  # the agent now holds the target's one slot
        stdout = None
        # waiting for the agent's slot would take agent_idle_s (300 s); 60 s is only a loaded machine's margin
        with anyio.move_on_after(60):
            stdout = (await ops.run("sudo", ["id", "-u"], privilege="root")).stdout
    assert stdout == "0\n"


@pytest.mark.slow
async def test_concurrent_execs_with_stdin_beyond_the_high_water_mark_all_complete(
    sshd: SshdInstance,
) -> None:
    size = 3 * 1024 * 1024  # each one alone is beyond the channel's 1 MiB of queued bytes
    outcomes: dict[int, str] = {}

    async def one(ops: RemoteOps, i: int) -> None:
        try:
            # a stall would end in this time limit (a wrong outcome below); generous for a loaded machine
            result = await ops.run("plain", ["wc", "-c"], stdin=b"x" * size, timeout_s=30)
        except RemoteOpsError as exc:
            outcomes[i] = type(exc).__name__
        else:
            outcomes[i] = result.stdout.strip()

    async with _ops(sshd, "plain", carrier="agent", kill_after_s=1) as ops:
        await ops.run("plain", ["true"])
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(one, ops, i)
    assert outcomes == {i: str(size) for i in range(4)}
