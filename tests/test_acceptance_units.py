"""The systemd units in ops/: the directives the gateway's service contract rests on, and the exposure score
``systemd-analyze security --offline=true`` gives them (pinned, so hardening cannot silently regress)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

OPS = Path(__file__).resolve().parents[1] / "ops"
GATEWAY = OPS / "remoteops-gateway.service"
TERMINAL = OPS / "remoteops-terminal-mcp.service"
MAX_EXPOSURE = {GATEWAY: 2.0, TERMINAL: 3.5}
"""Measured 1.4 and 3.1 with systemd 252 (0 = fully sandboxed, 10 = fully exposed)."""


def _service(path: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def test_the_gateway_unit_is_a_watched_notify_service_with_a_dedicated_user_and_a_sandbox() -> None:
    unit = _service(GATEWAY)
    wanted = {
        "Type": "notify",
        "NotifyAccess": "main",
        "Restart": "on-failure",
        "User": "remoteops",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ReadWritePaths": "/var/lib/remoteops-gateway",
        "CapabilityBoundingSet": "",
    }
    assert {key: unit.get(key, [None])[-1] for key in wanted} == wanted
    assert int(unit["WatchdogSec"][-1]) > 0
    assert "remoteops-terminal-mcp.service" in unit["Wants"][-1]
    assert "Requires" not in unit, "the upstream must stay a separate failure domain"
    assert "BindsTo" not in unit, "the upstream must stay a separate failure domain"


def test_the_terminal_unit_is_its_own_service_on_loopback_as_its_own_user() -> None:
    unit = _service(TERMINAL)
    assert unit["User"] == ["remoteops-term"]
    assert "--host 127.0.0.1" in unit["ExecStart"][-1]
    assert unit["IPAddressAllow"] == ["localhost"]
    assert unit["NoNewPrivileges"] == ["yes"]


@pytest.mark.parametrize("path", [GATEWAY, TERMINAL], ids=lambda p: p.name)
def test_the_exposure_score_stays_below_its_pinned_bound(path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (package systemd)")
    run = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", run.stdout + run.stderr)
    assert found, run.stdout + run.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE[path], run.stdout
