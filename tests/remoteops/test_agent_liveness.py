"""A stuck agent (``kill -STOP`` of its pid on the target) is found by the channel's liveness probe, killed
on the target and replaced; the calls it held end as ``transport_lost`` at once and are never re-sent. An
agent of another build than the one the gateway sends is replaced too. Against the real sshd (the target is
this machine, so the tests look at its process table), with short probe bounds.

The probe needs an agent that answers ``PING``: the shipped one once it lists PING in its HELLO kinds; until
then the shipped source with a minimal PING answer added here (``ping_agent``), sent by the real loader.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from remoteops import PrivilegeSettings, RemoteOps, TargetSpec, TransportLost, TransportSettings
from remoteops.agent import boot
from remoteops.agent import program as proto
from tests.fixtures.procs import pid_runs, processes_mentioning, wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.conftest import wait_for_line

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

PING = 0x06
FAST = {"agent_probe_s": 0.2, "agent_lost_after_s": 1.5}


@pytest.fixture
def ping_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(proto, "PING"):
        assert proto.PING == PING
        return  # the shipped agent answers PING itself
    source, _ = boot.agent_source()
    kinds = b'"kinds": [HELLO, EXEC, DATA, CANCEL, '
    dispatch = b"        if kind == CREDIT:\n"
    answer = (
        b"        if kind == 6:\n            self.send(encode(request_id, RESULT, {}))\n            return\n"
    )
    assert source.count(kinds) == 1
    assert source.count(dispatch) == 1
    patched = source.replace(kinds, kinds + b"6, ").replace(dispatch, answer + dispatch)
    digest = hashlib.sha256(patched).hexdigest()
    monkeypatch.setattr(boot, "agent_source", lambda: (patched, digest))


def _ops(sshd: SshdInstance, **overrides: object) -> RemoteOps:
    settings = TransportSettings.model_validate(
        {"ssh_config_file": sshd.ssh_config, "control_dir": sshd.control_dir, **FAST, **overrides}
    )
    return RemoteOps(settings, [TargetSpec(name="plain", host=sshd.alias("plain"))])


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid``; resumed afterwards if it is still there (the test must never leave it stopped)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _kill_marked(marker: str) -> None:
    for pid in processes_mentioning(marker, environ=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


async def _until_replaced(ops: RemoteOps, old_pid: int) -> int:
    """The pid of the agent that replaced ``old_pid``, as the carrier state shows it (bounded)."""
    with anyio.fail_after(30):
        # the replacement has no event a test can wait on: poll the state, bounded
        while True:
            state = ops.stats().carriers["plain"]
            if state.agent_alive and state.agent_pid not in (None, old_pid):
                assert state.agent_pid is not None
                return state.agent_pid
            await anyio.sleep(0.05)


@pytest.mark.usefixtures("ping_agent")
@pytest.mark.parametrize("carrier", ["agent", "auto"])
async def test_a_stopped_agent_ends_its_call_as_transport_lost_is_killed_and_replaced(
    sshd: SshdInstance, shared_dir: Path, carrier: str
) -> None:
    fifo = shared_dir / "started"
    os.mkfifo(fifo)
    fifo.chmod(0o666)
    runs = shared_dir / "runs"
    marker = f"rog-live-{uuid.uuid4().hex}"
    script = 'echo ran >> "$2"; echo started > "$1"; exec sleep 300'
    argv = ["env", f"MARK={marker}", "sh", "-c", script, "x", str(fifo), str(runs)]
    outcome: list[TransportLost] = []

    async def long_call(ops: RemoteOps) -> None:
        try:
            await ops.run("plain", argv, timeout_s=120)
        except TransportLost as exc:
            outcome.append(exc)

    try:
        async with _ops(sshd, carrier=carrier) as ops:
            with anyio.fail_after(60):
                await ops.prepare("plain")
                first = ops.stats().carriers["plain"]
                assert first.carrier == "agent"
                assert first.agent_pid is not None
                old = first.agent_pid
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_call, ops)
                    assert await wait_for_line(fifo) == "started\n"  # on the agent, running
                    with _stopped(old):
                        with anyio.fail_after(15):  # far below the call's 120 s: found by the probe
                            await wait_gone(old)  # killed on the target through the master
                        new = await _until_replaced(ops, old)
                state = ops.stats().carriers["plain"]
                after = await ops.exec_raw("plain", ["echo", "again"])
                latest = ops.stats().carriers["plain"]
    finally:
        _kill_marked(marker)
    assert len(outcome) == 1
    assert outcome[0].stage == "agent"
    # the command ran (it said so on the FIFO); the gateway may not have had the agent's word for it yet when
    # the agent stopped (a loaded machine): "may have run" (None) is honest, "did not run" (False) never is
    assert outcome[0].command_started is not False
    assert runs.read_text() == "ran\n"  # never re-sent
    assert not pid_runs(old)
    assert new != old
    assert state.agents_stuck == 1
    assert state.agent_pid == new
    assert after.carrier == "agent"
    assert after.stdout.head == b"again\n"
    assert latest.agent_pid == new


@pytest.mark.usefixtures("ping_agent")
async def test_an_idle_stopped_agent_is_found_and_replaced_without_any_call(sshd: SshdInstance) -> None:
    async with _ops(sshd, carrier="agent") as ops:
        with anyio.fail_after(60):
            await ops.run("plain", ["true"])
            old = ops.stats().carriers["plain"].agent_pid
            assert old is not None
            with _stopped(old):
                new = await _until_replaced(ops, old)
                await wait_gone(old)
            result = await ops.run("plain", ["echo", "fresh"])
            state = ops.stats().carriers["plain"]
    assert new != old
    assert result.stdout == "fresh\n"
    assert state.agent_pid == new
    assert state.agents_stuck == 1
    assert state.channels_started == 2


@pytest.mark.usefixtures("ping_agent")
async def test_an_agent_that_answers_its_probes_is_kept_however_long_its_command_runs(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd, carrier="agent") as ops:
        with anyio.fail_after(60):
            result = await ops.run("plain", ["sleep", "3"], timeout_s=30)  # many probe bounds long
            state = ops.stats().carriers["plain"]
    assert result.exit_code == 0
    assert state.agents_stuck == 0
    assert state.channels_started == 1


async def test_an_agent_of_another_build_is_replaced_by_the_next_call(
    sshd: SshdInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _ops(sshd, carrier="agent") as ops:
        with anyio.fail_after(60):
            await ops.run("plain", ["true"])
            before = ops.stats().carriers["plain"]
            assert before.agent_pid is not None
            source, build = boot.agent_source()
            changed = source + b"\n# another build\n"
            monkeypatch.setattr(boot, "agent_source", lambda: (changed, hashlib.sha256(changed).hexdigest()))
            await ops.run("plain", ["true"])
            after = ops.stats().carriers["plain"]
            await wait_gone(before.agent_pid)  # the old build closed and exited
    assert before.agent_build == build
    assert after.agent_build == hashlib.sha256(changed).hexdigest()
    assert after.agent_pid != before.agent_pid
    assert after.channels_started == 2


@pytest.mark.usefixtures("ping_agent")
async def test_a_stopped_root_agent_is_killed_as_root_and_the_next_root_command_gets_a_fresh_one(
    sshd: SshdInstance,
) -> None:
    settings = TransportSettings.model_validate(
        {"ssh_config_file": sshd.ssh_config, "control_dir": sshd.control_dir, "carrier": "agent", **FAST}
    )
    targets = [TargetSpec(name="sudo", host=sshd.alias("sudo"))]
    async with RemoteOps(settings, targets, privilege=PrivilegeSettings(agent=True)) as ops:
        with anyio.fail_after(60):
            await ops.run("sudo", ["true"], privilege="root")
            old = ops.stats().carriers["sudo"].root_agent_pid
            assert old is not None
            with _stopped(old):
                await wait_gone(old)  # uid 0: killed through the same provider (sudo -n)
            after = await ops.run("sudo", ["id", "-u"], privilege="root")
            state = ops.stats().carriers["sudo"]
    assert state.root_agent_pid not in (None, old)
    assert after.stdout == "0\n"
    assert state.root_carrier == "agent"
    assert state.agents_stuck == 1
    assert state.root_channels_started == 2
