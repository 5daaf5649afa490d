"""Capability probing, its cache, and diagnose sections against the real sshd."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from remoteops import CAPABILITY_TOOLS, AuthError, ConnectError, TargetSpec
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.conftest import OpsFactory

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]


async def test_capabilities_are_probed_once_and_served_from_cache(ops_factory: OpsFactory) -> None:
    async with ops_factory() as ops:
        first = await ops.capabilities("sudo")
        second = await ops.capabilities("sudo")
        refreshed = await ops.capabilities("sudo", refresh=True)
        stats = ops.stats()
    assert second == first
    assert refreshed.probed_at >= first.probed_at
    assert stats.capability_probes == 2
    assert stats.capability_cache_hits == 1
    assert first.user == "ro-sudo"
    assert first.uid is not None
    assert first.uid > 0
    assert first.sudo_nopasswd
    assert set(first.tools) == set(CAPABILITY_TOOLS)
    assert first.tools["timeout"]
    assert first.absent == sorted(name for name, present in first.tools.items() if not present)
    assert first.kernel
    assert first.arch


async def test_sudo_needing_a_password_is_reported_as_not_nopasswd(ops_factory: OpsFactory) -> None:
    async with ops_factory() as ops:
        caps = await ops.capabilities("pass")
    assert caps.tools["sudo"]
    assert not caps.sudo_nopasswd


async def test_capability_cache_is_invalidated_when_the_resolved_identity_changes(
    ops_factory: OpsFactory, sshd: SshdInstance, tmp_path: Path
) -> None:
    config = tmp_path / "ssh_config"
    original = sshd.ssh_config.read_text()
    config.write_text(original)
    targets = [TargetSpec(name="plain", host=sshd.alias("plain"))]
    async with ops_factory(targets, ssh_config_file=config) as ops:
        before = await ops.capabilities("plain")
        config.write_text(original.replace("User ro-plain", "User ro-sudo", 1))
        after = await ops.capabilities("plain")
        stats = ops.stats()
    assert before.user == "ro-plain"
    assert after.user == "ro-sudo"
    assert after.identity_hash != before.identity_hash
    assert stats.capability_probes == 2
    assert stats.capability_cache_hits == 0


async def test_a_failed_probe_is_never_cached(
    ops_factory: OpsFactory, sshd: SshdInstance, tmp_path: Path
) -> None:
    key = tmp_path / "late_key"
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"\nHost flaky\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User ro-plain\n  IdentityFile {key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    targets = [TargetSpec(name="flaky", host="flaky")]
    async with ops_factory(targets, ssh_config_file=config) as ops:
        with pytest.raises(AuthError):
            await ops.capabilities("flaky")
        shutil.copy(sshd.client_key, key)
        key.chmod(0o600)
        caps = await ops.capabilities("flaky")
        again = await ops.capabilities("flaky")
        stats = ops.stats()
    assert caps.user == "ro-plain"
    assert again == caps
    assert stats.capability_probes == 2
    assert stats.capability_cache_hits == 1


async def test_diagnose_reports_each_section_and_degrades_per_section(ops_factory: OpsFactory) -> None:
    async with ops_factory() as ops:
        good = await ops.diagnose("plain")
        bad = await ops.diagnose("closed")
    assert good.identity is not None
    assert good.capabilities is not None
    assert good.disks
    assert good.multiplex.master_alive
    if good.capabilities.tools.get("systemctl"):
        assert good.failed_units is not None or "failed_units" in good.errors
    assert bad.identity is not None
    assert bad.capabilities is None
    assert bad.errors["capabilities"].error == ConnectError.__name__


async def test_list_targets_shows_configured_targets_with_identity_and_multiplex_state(
    ops_factory: OpsFactory, sshd: SshdInstance
) -> None:
    async with ops_factory() as ops:
        await ops.run("root", ["true"])
        infos = {info.name: info for info in await ops.list_targets()}
    assert infos["root"].identity is not None
    assert infos["root"].identity.user == "root"
    assert infos["root"].identity.port == sshd.port
    assert infos["root"].multiplex.master_alive
    assert not infos["plain"].multiplex.master_alive
