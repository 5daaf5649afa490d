"""Choosing the carrier: ``auto`` falls back to ssh where the agent cannot run and says so; ``agent`` refuses;
a protocol mismatch is a clear answer, never a hang. Against the real sshd (user ro-nopy has no python3)."""

from __future__ import annotations

import anyio
import pytest

from remoteops import MissingCapability, RemoteOps, TargetSpec, TransportSettings
from remoteops.agent import program as proto
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]


def _ops(sshd: SshdInstance, **overrides: object) -> RemoteOps:
    settings = TransportSettings.model_validate(
        {"ssh_config_file": sshd.ssh_config, "control_dir": sshd.control_dir, **overrides}
    )
    targets = [
        TargetSpec(name="plain", host=sshd.alias("plain")),
        TargetSpec(name="nopy", host=sshd.alias("nopy")),
        TargetSpec(name="forced-ssh", host=sshd.alias("plain"), carrier="ssh"),
    ]
    return RemoteOps(settings, targets)


async def test_a_target_without_python3_gets_the_ssh_carrier_automatically_and_says_so(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(30):
            result = await ops.run("nopy", ["id", "-un"])
            caps = await ops.capabilities("nopy")
            plain = await ops.capabilities("plain")
        stats = ops.stats()
    assert result.exit_code == 0
    assert result.stdout == "ro-nopy\n"
    assert caps.tools["python3"] is False
    assert caps.carrier == "ssh"
    assert stats.carriers["nopy"].carrier == "ssh"
    assert stats.carriers["nopy"].reason is not None
    assert stats.carriers["nopy"].channels_started == 0
    assert plain.carrier == "agent"
    assert stats.carriers["plain"].agent_alive


async def test_target_capabilities_names_the_reason_a_target_without_python3_uses_ssh(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(30):
            caps = await ops.capabilities("nopy")
            forced = await ops.capabilities("forced-ssh")
            plain = await ops.capabilities("plain")
        stats = ops.stats()
    assert caps.carrier == "ssh"
    assert caps.carrier_reason is not None
    assert caps.carrier_reason == stats.carriers["nopy"].reason  # the same words gateway_health shows
    assert forced.carrier == "ssh"
    assert forced.carrier_reason is not None
    assert forced.carrier_reason == stats.carriers["forced-ssh"].reason
    assert plain.carrier == "agent"
    assert plain.carrier_reason is None


async def test_carrier_agent_on_a_target_without_python3_is_missing_capability(sshd: SshdInstance) -> None:
    async with _ops(sshd, carrier="agent") as ops:
        with anyio.fail_after(30), pytest.raises(MissingCapability) as info:
            await ops.run("nopy", ["true"])
        again = await ops.run("plain", ["echo", "fine"])
    assert info.value.capability == "python3"
    assert info.value.target == "nopy"
    assert again.stdout == "fine\n"


async def test_a_target_set_to_ssh_never_starts_an_agent(sshd: SshdInstance) -> None:
    async with _ops(sshd) as ops:
        raw = await ops.exec_raw("forced-ssh", ["true"])
        state = ops.stats().carriers["forced-ssh"]
    assert raw.carrier == "ssh"
    assert state.mode == "ssh"
    assert state.carrier == "ssh"
    assert state.channels_started == 0


async def test_a_protocol_mismatch_is_a_clear_error_never_a_hang(
    sshd: SshdInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the gateway side asks for a protocol the shipped agent does not speak
    monkeypatch.setattr(proto, "PROTOCOL_MIN", proto.PROTOCOL_MAX + 1)
    monkeypatch.setattr(proto, "PROTOCOL_MAX", proto.PROTOCOL_MAX + 1)
    async with _ops(sshd, carrier="agent") as ops:
        with anyio.fail_after(30), pytest.raises(MissingCapability) as info:
            await ops.run("plain", ["true"])
    assert info.value.capability == "agent protocol"
    async with _ops(sshd) as ops:  # auto: falls back to ssh and records why
        with anyio.fail_after(30):
            result = await ops.exec_raw("plain", ["echo", "via ssh"])
            state = await ops.prepare("plain")
    assert result.carrier == "ssh"
    assert result.stdout.head == b"via ssh\n"
    assert state.carrier == "ssh"
    assert state.reason is not None


async def test_refreshing_capabilities_lets_a_fallen_back_target_try_the_agent_again(
    sshd: SshdInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proto, "PROTOCOL_MIN", proto.PROTOCOL_MAX + 1)
    async with _ops(sshd) as ops:
        first = await ops.exec_raw("plain", ["true"])
        fallen_back = await ops.prepare("plain")
        monkeypatch.undo()  # the "target" is fixed
        caps = await ops.capabilities("plain", refresh=True)
        second = await ops.exec_raw("plain", ["true"])
    assert first.carrier == "ssh"
    assert fallen_back.carrier == "ssh"
    assert fallen_back.reason is not None
    assert caps.carrier == "agent"
    assert second.carrier == "agent"
