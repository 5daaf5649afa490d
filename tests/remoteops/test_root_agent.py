"""The root agent (``[root] agent = true``) against the real sshd, real sudo: root commands carried by one
per-target agent started through the chosen provider, separate from the user agent.

The target is this machine, so the tests look at its process table directly (``/proc``); a command's
parent is the process that started it, which tells the root agent apart from a sudo of the ssh path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops import (
    PrivilegeError,
    PrivilegeSettings,
    RemoteOps,
    SecretRequest,
    TargetSpec,
    TransportLost,
    TransportSettings,
)
from remoteops._exec import ExecRequest
from remoteops.agent.carrier import AgentCarrier
from remoteops.privilege.wire import Escalation
from remoteops.ssh.carrier import SshProcessCarrier
from remoteops.ssh.pool import MasterPool
from remoteops.ssh.resolve import IdentityResolver
from tests.fixtures.procs import pid_runs, processes_mentioning, wait_gone
from tests.fixtures.sshd import SshdInstance
from tests.remoteops import test_privilege_docker as docker_test
from tests.remoteops.conftest import wait_for_line

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

# the uid and the agent's pid (the command's parent is its call's supervisor, a child of the agent)
ID_AND_PARENT = ["sh", "-c", 'id -u; read -r _ _ _ agent _ < /proc/$PPID/stat; echo "$agent"']
engine = docker_test.engine  # the real container engine (or the skip saying why none runs here)


def _ops(sshd: SshdInstance, *, transport: dict[str, Any] | None = None, **privilege: Any) -> RemoteOps:
    settings = TransportSettings(
        ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir, carrier="agent", **(transport or {})
    )
    targets = [TargetSpec(name=role, host=sshd.alias(role)) for role in ("plain", "sudo", "pass", "root")]
    return RemoteOps(settings, targets, privilege=PrivilegeSettings(**privilege))


def _euid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    raise AssertionError(f"no Uid line for {pid}")


def _kill_marked(marker: str) -> None:
    for pid in processes_mentioning(marker, environ=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def _root_pid(ops: RemoteOps, name: str) -> int:
    state = ops.stats().carriers[name]
    assert state.root_carrier == "agent"
    assert state.root_agent_pid is not None
    return state.root_agent_pid


@pytest.mark.parametrize(("role", "provider"), [("sudo", "sudo_nopasswd"), ("root", "direct_root")])
async def test_five_root_commands_run_as_uid_0_on_one_root_agent_started_through_the_provider(
    sshd: SshdInstance, role: str, provider: str
) -> None:
    async with _ops(sshd, agent=True) as ops:
        with anyio.fail_after(60):
            results = [await ops.run(role, ID_AND_PARENT, privilege="root") for _ in range(5)]
            root_agent = _root_pid(ops, role)
            root_euid = _euid(root_agent)
            user = await ops.run(role, ID_AND_PARENT)
            state = ops.stats().carriers[role]
    assert [r.stdout for r in results] == [f"0\n{root_agent}\n"] * 5  # each one a child of that agent
    assert root_euid == 0
    for result in results:
        assert result.privilege is not None
        assert result.privilege.provider == provider
        assert result.privilege.ran_as == "root"
        assert result.privilege.attempts[-1].provider == provider
        assert result.privilege.attempts[-1].outcome == "ran"
    assert state.root_channels_started == 1
    assert state.root_agent_pid == root_agent
    # the user's commands keep their own agent channel
    assert state.carrier == "agent"
    assert state.agent_pid is not None
    assert state.agent_pid != root_agent
    assert user.stdout == f"{user.stdout.split()[0]}\n{state.agent_pid}\n"
    assert user.privilege is None


async def test_the_user_agent_of_a_sudo_user_stays_uid_not_0_beside_the_root_agent(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd, agent=True) as ops:
        with anyio.fail_after(60):
            before = await ops.run("sudo", ["id", "-u"])
            root = await ops.run("sudo", ["id", "-u"], privilege="root")
            after = await ops.run("sudo", ["id", "-u"])
            state = ops.stats().carriers["sudo"]
            assert state.agent_pid is not None
            assert state.root_agent_pid is not None
            euids = _euid(state.agent_pid), _euid(state.root_agent_pid)
    assert root.stdout == "0\n"
    assert before.stdout == after.stdout
    assert after.stdout.strip() != "0"
    assert euids[0] == int(after.stdout)
    assert euids[1] == 0


async def test_a_killed_root_agent_fails_its_command_without_rerunning_it_and_the_next_call_gets_a_fresh_one(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    marker = f"rogrootkill-{uuid.uuid4().hex}"
    fifo, counter = shared_dir / "started", shared_dir / "runs"
    os.mkfifo(fifo, 0o666)
    script = 'echo run >> "$2"; echo started > "$1"; sleep 30'
    errors: list[TransportLost] = []

    async def victim(ops: RemoteOps) -> None:
        argv = ["sh", "-c", script, "x", str(fifo), str(counter)]
        with pytest.raises(TransportLost) as info:
            await ops.run("sudo", argv, env={"ROG_TEST_MARK": marker}, timeout_s=25, privilege="root")
        errors.append(info.value)

    try:
        async with _ops(sshd, agent=True) as ops:
            with anyio.fail_after(60):
                await ops.run("sudo", ["true"], privilege="root")
                first = _root_pid(ops, "sudo")
                async with anyio.create_task_group() as tg:
                    tg.start_soon(victim, ops)
                    assert await wait_for_line(fifo) == "started\n"
                    os.kill(first, signal.SIGKILL)
                after = await ops.run("sudo", ID_AND_PARENT, privilege="root")
                second = _root_pid(ops, "sudo")
                state = ops.stats().carriers["sudo"]
    finally:
        _kill_marked(marker)
    assert len(errors) == 1
    assert errors[0].command_started is not False  # it may have run: not sent again
    assert counter.read_text() == "run\n"
    assert second != first
    assert after.stdout == f"0\n{second}\n"
    assert state.root_channels_started == 2


async def test_closing_remoteops_ends_the_root_agent_on_the_target(sshd: SshdInstance) -> None:
    async with _ops(sshd, agent=True) as ops:
        with anyio.fail_after(60):
            await ops.run("sudo", ["true"], privilege="root")
        root_agent = _root_pid(ops, "sudo")
        assert pid_runs(root_agent)
    await wait_gone(root_agent)
    assert not pid_runs(root_agent)


async def test_an_idle_root_agent_closes_itself_and_the_next_root_call_starts_a_new_one(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd, agent=True, transport={"agent_idle_s": 0.5}) as ops:
        with anyio.fail_after(60):
            await ops.run("sudo", ["true"], privilege="root")
            first = _root_pid(ops, "sudo")
            await wait_gone(first)
            result = await ops.run("sudo", ID_AND_PARENT, privilege="root")
            second = _root_pid(ops, "sudo")
            state = ops.stats().carriers["sudo"]
    assert second != first
    assert result.stdout == f"0\n{second}\n"
    assert state.root_channels_started == 2


async def test_by_default_root_commands_go_over_one_ssh_process_each(sshd: SshdInstance) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            result = await ops.run("sudo", ID_AND_PARENT, privilege="root")
            state = ops.stats().carriers["sudo"]
    assert result.stdout.startswith("0\n")
    assert result.privilege is not None
    assert result.privilege.provider == "sudo_nopasswd"
    assert state.root_carrier == "ssh"
    assert state.root_agent_pid is None
    assert state.root_channels_started == 0


async def test_too_few_channel_slots_for_a_root_agent_keep_root_commands_on_ssh(sshd: SshdInstance) -> None:
    async with _ops(sshd, agent=True, transport={"max_channels_per_target": 2}) as ops:
        with anyio.fail_after(60):
            result = await ops.run("sudo", ["id", "-u"], privilege="root")
            state = ops.stats().carriers["sudo"]
    assert result.stdout == "0\n"
    assert state.root_carrier == "ssh"
    assert state.root_channels_started == 0


class _FixedSecrets:
    def __init__(self, password: str) -> None:
        self.password = password
        self.asked: list[SecretRequest] = []

    async def obtain(self, request: SecretRequest) -> bytearray:
        self.asked.append(request)
        return bytearray(self.password.encode())


# every process's argv and environment on the target, into a file (the whole list: no output cap applies)
CAPTURE = (
    'for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do cat "$f"; echo; done >"$1" 2>/dev/null; true'
)


async def test_sudo_password_enters_the_password_once_at_the_root_agents_boot_and_never_shows_it(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    listing = shared_dir / "processes"
    secrets = _FixedSecrets(sshd.pass_password)
    async with _ops(sshd, agent=True, providers=("sudo_password",)) as ops:
        with anyio.fail_after(90):
            first = await ops.run("pass", ID_AND_PARENT, privilege="root", secrets=secrets)
            root_agent = _root_pid(ops, "pass")
            fed = await ops.run(
                "pass", ["sh", "-c", "id -u; cat"], stdin=b"payload-line\n", privilege="root", secrets=secrets
            )
            # every process's argv and environment on the target, the root agent's sudo among them
            argv = ["sh", "-c", CAPTURE, "capture", str(listing)]
            captured = await ops.run("pass", argv, privilege="root", secrets=secrets)
            again = await ops.run("pass", ID_AND_PARENT, privilege="root", secrets=secrets)
            state = ops.stats().carriers["pass"]
    assert first.stdout == f"0\n{root_agent}\n"
    assert again.stdout == f"0\n{root_agent}\n"
    assert fed.stdout == "0\npayload-line\n"  # the payload after the start, never read as a password
    assert captured.exit_code == 0
    processes = listing.read_bytes()
    assert b"rog-root-agent" in processes  # the root agent's boot command was in the capture
    assert sshd.pass_password.encode() not in processes
    assert len(secrets.asked) == 1  # the live root agent serves the later calls without a password
    assert state.root_carrier == "agent"
    assert state.root_channels_started == 1
    for result in (first, fed, captured, again):
        assert result.privilege is not None
        assert result.privilege.provider == "sudo_password"
        assert sshd.pass_password not in result.stdout
        assert sshd.pass_password not in result.stderr
        assert "rog-sudo" not in result.stderr  # the prompt is not part of any command's output


async def test_su_password_starts_a_root_agent_for_a_user_without_sudo(sshd: SshdInstance) -> None:
    secrets = _FixedSecrets(sshd.su_password)
    privilege: dict[str, Any] = {"providers": ("sudo_nopasswd", "su_password"), "su_user": sshd.su_user}
    async with _ops(sshd, agent=True, **privilege) as ops:
        with anyio.fail_after(90):
            results = [
                await ops.run("plain", ID_AND_PARENT, privilege="root", secrets=secrets) for _ in range(2)
            ]
            root_agent = _root_pid(ops, "plain")
    assert [r.stdout for r in results] == [f"0\n{root_agent}\n"] * 2
    assert [r.account for r in secrets.asked] == [sshd.su_user]
    for result in results:
        assert result.privilege is not None
        assert result.privilege.provider == "su_password"
        assert sshd.su_password not in result.stdout + result.stderr


async def test_a_wrong_password_starts_no_root_agent_and_is_a_privilege_error(sshd: SshdInstance) -> None:
    secrets = _FixedSecrets("not-the-password-" + uuid.uuid4().hex)
    async with _ops(sshd, agent=True, providers=("sudo_password",)) as ops:
        with anyio.fail_after(90):
            with pytest.raises(PrivilegeError) as info:
                await ops.run("pass", ["id", "-u"], privilege="root", secrets=secrets)
            state = ops.stats().carriers["pass"]
    assert info.value.reason == "wrong_password"
    assert secrets.password not in str(info.value)
    assert state.root_agent_pid is None
    assert state.root_channels_started == 0


async def test_a_root_agent_through_a_provider_that_does_not_give_uid_0_is_never_started(
    sshd: SshdInstance,
) -> None:
    """``direct_root`` forced on a non-root login: the boot prelude's ``id -u`` proof refuses it."""
    settings = TransportSettings(
        ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir, carrier="agent"
    )
    spec = TargetSpec(name="plain", host=sshd.alias("plain"))
    request = ExecRequest(
        argv=("id", "-u"), time_limit_s=10, escalation=Escalation(provider="direct_root", agent=True)
    )
    with anyio.fail_after(60):
        identity = await IdentityResolver(settings).resolve(spec)
        async with anyio.create_task_group() as tg:
            pool = MasterPool(settings, tg)
            carrier = AgentCarrier(settings, pool, tg, SshProcessCarrier(settings, pool))
            try:
                with pytest.raises(PrivilegeError) as info:
                    await carrier.execute(spec, identity, request)
                state = carrier.state(spec)
            finally:
                await carrier.aclose()
                await pool.aclose()
                tg.cancel_scope.cancel()
    assert info.value.reason == "not_root"
    assert info.value.provider == "direct_root"
    assert state.root_agent_pid is None
    assert state.root_channels_started == 0


@pytest.mark.slow
async def test_docker_host_root_starts_a_root_agent_in_a_privileged_host_pid_container(
    sshd: SshdInstance, engine: tuple[str, tuple[str, ...]]
) -> None:
    binary, options = engine
    privilege = {
        "providers": ("docker_host_root",),
        "docker_image": docker_test.IMAGE,
        "docker_binary": binary,
        "docker_run_args": options,
    }
    async with _ops(sshd, agent=True, **privilege) as ops:
        with anyio.fail_after(120):
            results = [await ops.run("root", ID_AND_PARENT, privilege="root") for _ in range(3)]
            root_agent = _root_pid(ops, "root")
            root_euid = _euid(root_agent)
            state = ops.stats().carriers["root"]
    await wait_gone(root_agent)
    assert [r.stdout for r in results] == [f"0\n{root_agent}\n"] * 3  # host pids: --pid=host
    assert root_euid == 0
    assert state.root_channels_started == 1
    for result in results:
        assert result.privilege is not None
        assert result.privilege.provider == "docker_host_root"
    assert not pid_runs(root_agent)
