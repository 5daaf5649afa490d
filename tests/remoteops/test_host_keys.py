"""Host keys are always checked; a target may opt into accept-new (first contact only), never into 'off'."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from remoteops import HostKeyError, RemoteOps, TargetSpec, TransportSettings
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]


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


def _settings(cfg: Path, carrier: str = "auto") -> TransportSettings:
    return TransportSettings.model_validate(
        {"ssh_config_file": cfg, "control_dir": cfg.parent / "ctl", "carrier": carrier}
    )


# ``agent``: the failure meets the agent's boot; ``auto``: the call goes over ssh while the agent boots
CARRIERS = pytest.mark.parametrize("carrier", ["auto", "agent"])


@CARRIERS
async def test_an_unknown_host_key_is_refused_under_the_strict_default(
    fresh_known_hosts: tuple[Path, Path], carrier: str
) -> None:
    cfg, known = fresh_known_hosts
    target = TargetSpec(name="t", host="sshd-unknown")
    async with RemoteOps(_settings(cfg, carrier), [target]) as ops:
        with anyio.fail_after(30), pytest.raises(HostKeyError) as info:
            await ops.run("t", ["true"])
    assert info.value.reason == "unknown"
    assert known.read_text() == ""


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


def _ssh_stderr(cfg: Path, alias: str) -> list[str]:
    """What OpenSSH itself prints for ``alias`` (strict checking), as stripped lines."""
    proc = subprocess.run(
        ["ssh", "-F", str(cfg), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", alias, "true"],
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert proc.returncode == 255
    return [line.strip() for line in proc.stderr.decode().splitlines()]


def _ssh_part(error: HostKeyError) -> list[str]:
    lines = error.detail.splitlines()
    advice = next(i for i, line in enumerate(lines) if line.startswith("What to do:"))
    return lines[:advice]


@pytest.mark.parametrize("mode", ["auto", "required", "off"])
@CARRIERS
async def test_a_changed_host_key_error_carries_sshs_whole_lines_fingerprint_and_offending_entry(
    sshd: SshdInstance, mode: str, carrier: str
) -> None:
    settings = TransportSettings.model_validate(
        {
            "ssh_config_file": sshd.ssh_config,
            "control_dir": sshd.control_dir,
            "multiplex": mode,
            "carrier": carrier,
        }
    )
    target = TargetSpec(name="bad", host=sshd.alias("badhostkey"))
    async with RemoteOps(settings, [target]) as ops:
        with anyio.fail_after(30), pytest.raises(HostKeyError) as info:
            await ops.run("bad", ["true"])
    error = info.value
    raw = _ssh_stderr(sshd.ssh_config, sshd.alias("badhostkey"))
    shown = _ssh_part(error)
    assert set(shown) <= set(raw)  # whole lines of ssh's own output, none cut
    assert "Host key verification failed." in shown
    assert any(line.startswith("ssh-keygen -f ") for line in shown)  # ssh's own removal command
    assert (error.reason, error.host) == ("changed", f"[127.0.0.1]:{sshd.port}")
    assert error.fingerprint is not None
    assert error.fingerprint in " ".join(raw)
    bad_known = sshd.known_hosts.parent / "known_hosts_bad"
    assert error.known_hosts == f"{bad_known}:1"
    assert "accept-new" in error.detail  # says that accept-new is no way out for a changed key


@CARRIERS
async def test_an_unknown_host_key_error_says_how_to_add_the_key_and_following_it_works(
    fresh_known_hosts: tuple[Path, Path], sshd: SshdInstance, carrier: str
) -> None:
    cfg, known = fresh_known_hosts
    target = TargetSpec(name="t", host="sshd-unknown")
    async with RemoteOps(_settings(cfg, carrier), [target]) as ops:
        with pytest.raises(HostKeyError) as info:
            await ops.run("t", ["true"])
        error = info.value
        assert (error.reason, error.host) == ("unknown", f"[127.0.0.1]:{sshd.port}")
        assert set(_ssh_part(error)) <= set(_ssh_stderr(cfg, "sshd-unknown"))
        assert 'host_key_policy = "accept-new"' in error.detail
        advised = re.search(r"ssh-keyscan -p (\d+) (\S+) >>", error.detail)
        assert advised is not None
        assert advised.groups() == (str(sshd.port), "127.0.0.1")
        # follow the advice (the fixture's own key is the verified one here): the next call succeeds
        scan = await anyio.run_process(
            ["ssh-keyscan", "-t", "ed25519", "-p", advised.group(1), advised.group(2)], check=True
        )
        known.write_bytes(scan.stdout)
        with anyio.fail_after(30):
            result = await ops.run("t", ["echo", "enrolled"])
        state = ops.stats().carriers["t"]
    assert (result.exit_code, result.stdout) == (0, "enrolled\n")
    if carrier == "agent":  # the refused boot left nothing behind that keeps the agent from starting now
        assert state.channels_started == 1
        assert state.carrier == "agent"
