"""Transport failures and the ControlMaster pool against the real sshd."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import anyio
import pytest

from remoteops import AuthError, ConnectError, HostKeyError, RemoteOps, TransportLost
from tests.fixtures.procs import wait_gone
from tests.remoteops.conftest import OpsFactory, wait_for_line

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

MODES = pytest.mark.parametrize("mode", ["auto", "required", "off"])
# ``agent``: the failure meets the agent's boot (its session through the pool); ``auto``: the call goes over
# ssh while the agent boots in the background
CARRIERS = pytest.mark.parametrize("carrier", ["auto", "agent", "ssh"])


async def master_pid(ops: RemoteOps, name: str) -> int:
    info = {t.name: t for t in await ops.list_targets()}[name]
    assert info.multiplex.master_alive
    assert info.multiplex.master_pid is not None
    return info.multiplex.master_pid


@MODES
@CARRIERS
async def test_host_key_mismatch_raises_host_key_error(
    ops_factory: OpsFactory, mode: str, carrier: str
) -> None:
    async with ops_factory(multiplex=mode, carrier=carrier) as ops:
        with anyio.fail_after(30), pytest.raises(HostKeyError) as info:
            await ops.run("badhostkey", ["true"])
        assert ops.stats().failures == {"HostKeyError": 1}
        assert ops.stats().carriers["badhostkey"].agent_alive is False
    assert info.value.reason == "changed"
    assert info.value.target == "badhostkey"


@MODES
@CARRIERS
async def test_wrong_client_key_raises_auth_error(ops_factory: OpsFactory, mode: str, carrier: str) -> None:
    async with ops_factory(multiplex=mode, carrier=carrier) as ops:
        with anyio.fail_after(30), pytest.raises(AuthError) as info:
            await ops.run("wrongkey", ["true"])
        assert ops.stats().failures == {"AuthError": 1}
    assert info.value.target == "wrongkey"
    assert info.value.remedy.startswith("What to do:")  # like the host-key errors, it says how to fix it
    assert "wrongkey" in info.value.remedy


@MODES
@CARRIERS
async def test_closed_port_raises_connect_error_refused(
    ops_factory: OpsFactory, mode: str, carrier: str
) -> None:
    async with ops_factory(multiplex=mode, carrier=carrier) as ops:
        with anyio.fail_after(30), pytest.raises(ConnectError) as info:
            await ops.run("closed", ["true"])
        assert ops.stats().failures == {"ConnectError": 1}
    assert info.value.reason == "refused"
    assert info.value.retryable
    assert info.value.target == "closed"


@MODES
async def test_with_carrier_agent_a_second_call_after_a_failed_boot_is_classified_the_same_way(
    ops_factory: OpsFactory, mode: str
) -> None:
    # the failed boot is not remembered as "no agent here": the next call tries again and meets the same cause
    async with ops_factory(multiplex=mode, carrier="agent") as ops:
        with anyio.fail_after(60):
            for _ in range(2):
                with pytest.raises(HostKeyError):
                    await ops.run("badhostkey", ["true"])
                with pytest.raises(AuthError):
                    await ops.run("wrongkey", ["true"])
            result = await ops.run("plain", ["echo", "fine"])
        stats = ops.stats()
    assert stats.failures == {"HostKeyError": 2, "AuthError": 2}
    assert stats.carriers["badhostkey"].mode == "agent"
    assert stats.carriers["badhostkey"].channels_started == 0
    assert result.stdout == "fine\n"
    assert stats.carriers["plain"].carrier == "agent"


async def test_off_mode_runs_without_a_master(ops_factory: OpsFactory) -> None:
    async with ops_factory(multiplex="off") as ops:
        result = await ops.run("plain", ["sh", "-c", "exit 255"])
        assert ops.stats().masters_created == 0
    assert result.exit_code == 255
    assert not result.multiplexed


async def test_master_killed_mid_command_raises_transport_lost_and_the_command_ran_once(
    ops_factory: OpsFactory, shared_dir: Path
) -> None:
    counter, fifo = shared_dir / "count", shared_dir / "started"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    marker = f"rogvictim-{uuid.uuid4().hex}"
    script = 'echo ran >> "$1"; echo started > "$2"; sleep 30'
    errors: list[TransportLost] = []

    async def victim(ops: RemoteOps) -> None:
        with pytest.raises(TransportLost) as info:
            await ops.run("plain", ["sh", "-c", script, marker, str(counter), str(fifo)], timeout_s=25)
        errors.append(info.value)

    try:
        async with ops_factory() as ops:
            await ops.run("plain", ["true"])
            pid = await master_pid(ops, "plain")
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(victim, ops)
                    assert await wait_for_line(fifo) == "started\n"
                    os.kill(pid, signal.SIGKILL)
            after = await ops.run("plain", ["true"])  # a new master, nothing re-run
            stats = ops.stats()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.run_process(["pkill", "-f", marker], check=False)
    assert len(errors) == 1
    assert errors[0].command_started is not False
    assert counter.read_text() == "ran\n"
    assert after.exit_code == 0
    assert stats.masters_created == 2
    assert stats.failures == {"TransportLost": 1}


async def test_stale_master_socket_is_recovered_and_counted(ops_factory: OpsFactory) -> None:
    async with ops_factory() as ops:
        await ops.run("plain", ["true"])
        pid = await master_pid(ops, "plain")
        os.kill(pid, signal.SIGKILL)
        await wait_gone(pid)
        result = await ops.run("plain", ["echo", "again"])
        stats = ops.stats()
        new_pid = await master_pid(ops, "plain")
    assert result.stdout == "again\n"
    assert stats.stale_recovered == 1
    assert stats.masters_created == 2
    assert new_pid != pid


def _no_master_ssh(directory: Path) -> Path:
    """An ssh that can make no ControlMaster (like a build without multiplexing); everything else is real."""
    shim = directory / "ssh-nomux"
    shim.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do if [ "$a" = "-M" ]; then echo "multiplexing unavailable" >&2; exit 255; fi; done\n'
        'exec ssh "$@"\n'
    )
    shim.chmod(0o755)
    return shim


async def test_required_mode_fails_before_running_anything_when_no_master_can_be_made(
    ops_factory: OpsFactory, shared_dir: Path
) -> None:
    counter = shared_dir / "ran"
    async with ops_factory(multiplex="required", ssh_binary=str(_no_master_ssh(shared_dir))) as ops:
        with pytest.raises(ConnectError) as info:
            await ops.run("plain", ["touch", str(counter)])
    assert info.value.reason == "multiplex"
    assert not counter.exists()


async def test_auto_mode_falls_back_to_a_one_shot_connection_when_no_master_can_be_made(
    ops_factory: OpsFactory, shared_dir: Path
) -> None:
    counter = shared_dir / "ran"
    # one ssh per call: the pool is asked (and falls back) for every call
    ssh = str(_no_master_ssh(shared_dir))
    async with ops_factory(multiplex="auto", ssh_binary=ssh, carrier="ssh") as ops:
        result = await ops.run("plain", ["touch", str(counter)])
        again = await ops.run("plain", ["true"])
        stats = ops.stats()
    assert result.exit_code == 0
    assert not result.multiplexed
    assert again.exit_code == 0
    assert counter.exists()
    assert stats.fallbacks == 2
    assert stats.masters_created == 0


async def test_long_control_directory_paths_still_work(ops_factory: OpsFactory, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    async with ops_factory(control_dir=deep) as ops:
        result = await ops.run("plain", ["echo", "ok"])
        info = {t.name: t for t in await ops.list_targets()}["plain"]
        stats = ops.stats()
    assert result.exit_code == 0
    assert result.multiplexed
    assert stats.control_dir_fallback
    assert info.multiplex.control_path is not None
    assert len(info.multiplex.control_path.encode()) < 108


async def test_masters_are_reused_and_closed_on_exit(ops_factory: OpsFactory) -> None:
    async with ops_factory(carrier="ssh") as ops:  # one ssh per call: every call reuses the master
        for _ in range(3):
            await ops.run("plain", ["true"])
        pid = await master_pid(ops, "plain")
        stats = ops.stats()
    await wait_gone(pid)
    assert stats.masters_created == 1
    assert stats.masters_reused == 2


async def test_lru_eviction_keeps_live_masters_bounded(ops_factory: OpsFactory) -> None:
    # one ssh per call: no agent channel keeps a master busy (tests/remoteops/test_agent.py covers that)
    async with ops_factory(max_masters=1, carrier="ssh") as ops:
        await ops.run("plain", ["true"])
        first = await master_pid(ops, "plain")
        await ops.run("sudo", ["true"])
        await wait_gone(first)
        stats = ops.stats()
    assert stats.evictions == 1
    assert stats.live_masters == 1
