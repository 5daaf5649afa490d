"""The agent carrier against both real peers: the throwaway OpenSSH sshd and the embedded asyncssh target.

The target is this machine in both cases, so the tests look at its process table directly (``/proc``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops import RemoteOps, TargetSpec, TransportLost, TransportSettings
from remoteops.embedded.target import EmbeddedTarget
from tests.fixtures.procs import pid_runs, processes_mentioning, wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.conftest import wait_for_line

pytestmark = pytest.mark.anyio

ALL_BYTES = bytes(range(256))


@dataclass
class Peer:
    kind: str
    name: str  # the target name that works
    settings: TransportSettings
    targets: list[TargetSpec]

    def ops(self, **overrides: Any) -> RemoteOps:
        """RemoteOps on this peer; ``carrier = "agent"`` unless overridden (auto would send the calls made
        while the agent boots over ssh)."""
        settings = TransportSettings.model_validate(
            {**self.settings.model_dump(), "carrier": "agent", **overrides}
        )
        return RemoteOps(settings, self.targets)


@pytest.fixture(params=[pytest.param("sshd", marks=pytest.mark.sshd), "embedded"])
async def peer(request: pytest.FixtureRequest, shared_dir: Path) -> AsyncIterator[Peer]:
    if request.param == "sshd":
        sshd = request.getfixturevalue("sshd")
        settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
        yield Peer("sshd", "plain", settings, [TargetSpec(name="plain", host=sshd.alias("plain"))])
        return
    async with EmbeddedTarget(shared_dir / "emb") as target:
        settings = TransportSettings(ssh_config_file=target.ssh_config_path, control_dir=shared_dir / "c")
        yield Peer("embedded", "demo", settings, [TargetSpec(name="demo", host=target.alias)])


def _kill_marked(marker: str) -> None:
    for pid in processes_mentioning(marker, environ=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def _agent_pid(ops: RemoteOps, name: str) -> int:
    state = ops.stats().carriers[name]
    assert state.carrier == "agent"
    assert state.agent_alive
    assert state.agent_pid is not None
    return state.agent_pid


async def test_a_hundred_concurrent_execs_share_one_agent_channel_and_all_answer_correctly(
    peer: Peer,
) -> None:
    outputs: dict[int, tuple[int | None, str]] = {}

    async def one(ops: RemoteOps, i: int) -> None:
        result = await ops.run(
            peer.name, ["sh", "-c", 'printf "%s" "$1"; printf "e%s" "$1" >&2', "x", str(i)]
        )
        outputs[i] = (result.exit_code, result.stdout + "|" + result.stderr)

    async with peer.ops() as ops:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(one, ops, i)
        stats = ops.stats()
    assert outputs == {i: (0, f"{i}|e{i}") for i in range(100)}
    assert stats.carriers[peer.name].channels_started == 1
    assert stats.masters_created == 1
    assert stats.failures == {}


@pytest.mark.parametrize("carrier", ["agent", "ssh"])
async def test_binary_stdout_of_all_256_byte_values_arrives_byte_exact(peer: Peer, carrier: str) -> None:
    octal = "".join(f"\\{value:03o}" for value in ALL_BYTES)
    async with peer.ops(carrier=carrier) as ops:
        raw = await ops.exec_raw(peer.name, ["printf", octal])
        echoed = await ops.exec_raw(peer.name, ["cat"], stdin=ALL_BYTES * 100)
    assert raw.carrier == carrier
    assert raw.exit_code == 0
    assert raw.stdout.head + raw.stdout.tail == ALL_BYTES
    assert echoed.stdout.head + echoed.stdout.tail == ALL_BYTES * 100


@pytest.mark.parametrize("carrier", ["agent", "ssh"])
async def test_a_missing_program_is_exit_127_with_a_plain_message(peer: Peer, carrier: str) -> None:
    async with peer.ops(carrier=carrier) as ops:
        result = await ops.run(peer.name, ["rog-no-such-program", "arg"])
    assert result.exit_code == 127
    assert "rog-no-such-program" in result.stderr
    assert "timeout" not in result.stderr


@pytest.mark.parametrize("carrier", ["agent", "ssh"])
@pytest.mark.parametrize("name", ["KILL", "TERM"])
async def test_a_command_ended_by_a_signal_reports_the_signal_by_name(
    peer: Peer, carrier: str, name: str
) -> None:
    async with peer.ops(carrier=carrier) as ops:
        with anyio.fail_after(30):
            raw = await ops.exec_raw(peer.name, ["sh", "-c", f"echo before; kill -{name} $$; echo after"])
            result = await ops.run(peer.name, ["sh", "-c", f"kill -{name} $$"])
    number = int(getattr(signal, f"SIG{name}"))
    assert raw.carrier == carrier
    assert raw.stdout.head == b"before\n"  # ended where the signal hit it
    assert result.signal == name
    assert result.exit_code == 128 + number
    assert result.timed_out is False
    assert result.remote_killed is False  # the command's own doing, not a kill by the carrier
    if carrier == "agent":  # the agent saw the signal itself (waitpid), not a shell's 128+N
        assert raw.signal == name


@pytest.mark.slow
@pytest.mark.parametrize("carrier", ["agent", "ssh"])
async def test_a_setsid_grandchild_is_gone_after_a_timeout_and_the_kill_is_confirmed(
    peer: Peer, carrier: str
) -> None:
    marker = f"rogsetsid-{uuid.uuid4().hex}"
    script = "setsid sleep 301 & (setsid sleep 302 &); sleep 303"
    try:
        async with peer.ops(carrier=carrier) as ops:
            with anyio.fail_after(30):
                result = await ops.run(
                    peer.name, ["sh", "-c", script], env={"ROG_TEST_MARK": marker}, timeout_s=1
                )
        assert result.timed_out
        assert result.remote_killed
        assert processes_mentioning(marker, environ=True) == []
    finally:
        _kill_marked(marker)


async def test_a_cancelled_call_leaves_no_process_on_the_target(peer: Peer, shared_dir: Path) -> None:
    marker = f"rogcancel-{uuid.uuid4().hex}"
    fifo = shared_dir / "started"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    script = 'setsid sleep 311 & (setsid sleep 312 &); echo started > "$1"; sleep 313'
    scope = anyio.CancelScope()

    async def victim(ops: RemoteOps) -> None:
        with scope:
            await ops.run(peer.name, ["sh", "-c", script, "x", str(fifo)], env={"ROG_TEST_MARK": marker})

    try:
        async with peer.ops() as ops:
            await ops.run(peer.name, ["true"])
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(victim, ops)
                    assert await wait_for_line(fifo) == "started\n"
                    # the two setsid children are forked but may still be on their way (a loaded machine)
                    for _ in range(500):  # /proc has no event to wait on; bounded (10 s)
                        if len(processes_mentioning(marker, environ=True)) >= 3:
                            break
                        await anyio.sleep(0.02)
                    assert len(processes_mentioning(marker, environ=True)) >= 3
                    scope.cancel()
            left = processes_mentioning(marker, environ=True)
            assert ops.stats().carriers[peer.name].carrier == "agent"
        assert scope.cancelled_caught
        assert left == []
    finally:
        _kill_marked(marker)


async def test_kill_9_of_the_agent_mid_command_is_transport_lost_and_the_next_call_gets_a_fresh_channel(
    peer: Peer, shared_dir: Path
) -> None:
    marker = f"rogagentkill-{uuid.uuid4().hex}"
    fifo, counter = shared_dir / "started", shared_dir / "runs"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    script = 'echo run >> "$2"; echo started > "$1"; sleep 30'
    errors: list[TransportLost] = []

    async def victim(ops: RemoteOps) -> None:
        argv = ["sh", "-c", script, "x", str(fifo), str(counter)]
        with pytest.raises(TransportLost) as info:
            await ops.run(peer.name, argv, env={"ROG_TEST_MARK": marker}, timeout_s=25)
        errors.append(info.value)

    try:
        async with peer.ops() as ops:
            await ops.run(peer.name, ["true"])
            agent = _agent_pid(ops, peer.name)
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(victim, ops)
                    assert await wait_for_line(fifo) == "started\n"
                    os.kill(agent, signal.SIGKILL)
                after = await ops.run(peer.name, ["echo", "again"])
            state = ops.stats().carriers[peer.name]
    finally:
        _kill_marked(marker)
    assert len(errors) == 1
    # may have run: seen starting, or unknown (the agent can die before its STARTED frame leaves)
    assert errors[0].command_started is not False
    assert counter.read_text() == "run\n"  # never re-sent
    assert after.stdout == "again\n"
    assert state.channels_started == 2
    assert state.agent_pid != agent


async def test_the_master_killed_mid_command_is_transport_lost_and_the_next_call_gets_a_fresh_channel(
    peer: Peer, shared_dir: Path
) -> None:
    marker = f"rogmasterkill-{uuid.uuid4().hex}"
    fifo = shared_dir / "started"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    errors: list[TransportLost] = []

    async def victim(ops: RemoteOps) -> None:
        argv = ["sh", "-c", 'echo started > "$1"; sleep 30', "x", str(fifo)]
        with pytest.raises(TransportLost) as info:
            await ops.run(peer.name, argv, env={"ROG_TEST_MARK": marker}, timeout_s=25)
        errors.append(info.value)

    try:
        async with peer.ops() as ops:
            await ops.run(peer.name, ["true"])
            info = {t.name: t for t in await ops.list_targets()}[peer.name]
            assert info.multiplex.master_pid is not None
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(victim, ops)
                    assert await wait_for_line(fifo) == "started\n"
                    os.kill(info.multiplex.master_pid, signal.SIGKILL)
                after = await ops.run(peer.name, ["echo", "again"])
            stats = ops.stats()
    finally:
        _kill_marked(marker)
    assert len(errors) == 1
    assert errors[0].command_started is not False
    assert after.stdout == "again\n"
    assert stats.masters_created == 2
    assert stats.carriers[peer.name].channels_started == 2


async def test_an_idle_agent_channel_closes_itself_and_the_next_call_starts_a_new_one(peer: Peer) -> None:
    async with peer.ops(agent_idle_s=0.5) as ops:
        await ops.run(peer.name, ["true"])
        first = _agent_pid(ops, peer.name)
        await wait_gone(first)  # the agent exits once its channel closed
        result = await ops.run(peer.name, ["echo", "back"])
        state = ops.stats().carriers[peer.name]
    assert result.stdout == "back\n"
    assert state.channels_started == 2


async def test_in_auto_mode_a_cold_targets_first_call_does_not_wait_for_the_agent(peer: Peer) -> None:
    async with peer.ops(carrier="auto") as ops:
        first = await ops.exec_raw(peer.name, ["echo", "one"])
        state = await ops.prepare(peer.name)
        second = await ops.exec_raw(peer.name, ["echo", "two"])
    assert first.carrier == "ssh"  # the agent was booting in the background
    assert first.stdout.head == b"one\n"
    assert state.carrier == "agent"
    assert state.agent_alive
    assert second.carrier == "agent"
    assert second.stdout.head == b"two\n"


@pytest.mark.sshd
async def test_at_max_masters_a_new_targets_agent_closes_the_least_recently_used_idle_one(
    sshd: SshdInstance,
) -> None:
    settings = TransportSettings(
        ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir, carrier="agent", max_masters=1
    )
    targets = [TargetSpec(name=role, host=sshd.alias(role)) for role in ("plain", "sudo")]
    async with RemoteOps(settings, targets) as ops:
        await ops.run("plain", ["true"])
        first = _agent_pid(ops, "plain")
        result = await ops.run("sudo", ["id", "-un"])
        await wait_gone(first)
        stats = ops.stats()
    assert result.stdout == "ro-sudo\n"
    assert stats.evictions == 1
    assert stats.live_masters == 1
    assert stats.carriers["plain"].agent_alive is False
    assert stats.carriers["sudo"].agent_alive is True


async def test_closing_remoteops_ends_the_agent_on_the_target(peer: Peer) -> None:
    async with peer.ops() as ops:
        await ops.run(peer.name, ["true"])
        agent = _agent_pid(ops, peer.name)
    await wait_gone(agent)
    assert not pid_runs(agent)
