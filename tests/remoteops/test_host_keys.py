"""Host keys are always checked; a target may opt into accept-new (first contact only), never into 'off'."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from remoteops import HostKeyError, RemoteOps, TargetSpec, TransportSettings
from tests.fixtures.sshd import SshdInstance


@pytest.fixture
def fresh_known_hosts(sshd: SshdInstance) -> Iterator[tuple[Path, Path]]:
    """An ssh_config whose alias ``sshd-unknown`` points at the fixture sshd with an empty known_hosts."""
    work = Path(tempfile.mkdtemp(prefix="rogk-", dir="/tmp"))
    known = work / "known_hosts"
    known.touch()
    cfg = work / "ssh_config"
    cfg.write_text(
        f"Host sshd-unknown\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.users['plain']}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        "  GlobalKnownHostsFile /dev/null\n"
    )
    try:
        yield cfg, known
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _settings(cfg: Path) -> TransportSettings:
    return TransportSettings(ssh_config_file=cfg, control_dir=cfg.parent / "ctl")


@pytest.mark.anyio
async def test_an_unknown_host_key_is_refused_under_the_strict_default(
    fresh_known_hosts: tuple[Path, Path],
) -> None:
    cfg, known = fresh_known_hosts
    target = TargetSpec(name="t", host="sshd-unknown")
    async with RemoteOps(_settings(cfg), [target]) as ops:
        with pytest.raises(HostKeyError) as info:
            await ops.run("t", ["true"])
    assert info.value.reason == "unknown"
    assert known.read_text() == ""


@pytest.mark.anyio
async def test_accept_new_records_the_first_key_and_then_checks_it(
    fresh_known_hosts: tuple[Path, Path], sshd: SshdInstance
) -> None:
    cfg, known = fresh_known_hosts
    target = TargetSpec(name="t", host="sshd-unknown", host_key_policy="accept-new")
    async with RemoteOps(_settings(cfg), [target]) as ops:
        result = await ops.run("t", ["echo", "first contact"])
    assert result.exit_code == 0
    recorded = known.read_text()
    assert f"[127.0.0.1]:{sshd.port}" in recorded
    # A changed key is still refused under accept-new: replace the recorded key with another one.
    bad_key = (sshd.known_hosts.parent / "known_hosts_bad").read_text().split(None, 1)[1]
    known.write_text(f"[127.0.0.1]:{sshd.port} {bad_key}")
    async with RemoteOps(_settings(cfg), [target]) as ops:
        with pytest.raises(HostKeyError) as info:
            await ops.run("t", ["true"])
    assert info.value.reason == "changed"
