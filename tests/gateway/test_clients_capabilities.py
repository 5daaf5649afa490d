"""The MCP Inspector CLI, speaking stdio to ``serve --stdio`` (the gateway as its child process), calls
``target_capabilities`` on the real sshd: on a login without python3 (``ro-nopy``) the result it accepts
against the tool's ``outputSchema`` says ``carrier: ssh`` and why, in the words ``gateway_health`` uses."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gateway_proc import write_config
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ToolRun, ensure_tool
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.slow, pytest.mark.sshd]

CLIENT_TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


def _stdio_call(inspector: InstalledTool, config: Path, home: Path, tool: str, *pairs: str) -> dict[str, Any]:
    """One tools/call through the Inspector over stdio; the gateway is its child (``serve --stdio``)."""
    args = [a for pair in pairs for a in ("--tool-arg", pair)]
    argv = [
        "--cli",
        "-e",
        f"REMOTEOPS_GATEWAY_CONFIG={config}",
        "--transport",
        "stdio",
        "--method",
        "tools/call",
        "--tool-name",
        tool,
        *args,
        "--format",
        "json",
        "--",
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--stdio",
    ]
    run: ToolRun = inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=home)
    assert run.returncode == 0, run.describe()
    result = json.loads(run.stdout)["result"]
    assert isinstance(result, dict)
    assert result.get("isError") is False, (result, run.describe())
    return result


def test_the_inspector_over_stdio_sees_why_a_target_without_python3_uses_ssh(
    inspector: InstalledTool, sshd: SshdInstance, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path / "gateway.toml",
        {
            "state_dir": str(tmp_path / "state"),
            "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
            "targets": [{"name": "nopy", "host": sshd.alias("nopy")}],
            "tools": {"toolsets": ["inspect"]},
        },
    )
    result = _stdio_call(inspector, config, tmp_path, "target_capabilities", "target=nopy")
    caps = result["structuredContent"]
    assert caps["tools"]["python3"] is False
    assert caps["carrier"] == "ssh"
    assert caps["carrier_reason"]
    assert caps["carrier_reason"] in result["content"][0]["text"]
