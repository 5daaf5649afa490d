"""The MCP Inspector CLI (the official TypeScript client) drives ``remote_root_exec`` with ``[root] agent =
true`` against the real gateway on the real sshd with real sudo: root commands from separate client sessions
run on one uid-0 root agent, a command over its time limit is a normal result, and the failures (a target
outside the root allow-list, an argv that is not a list) come back as errors the client shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ensure_tool
from tests.fixtures.sshd import SshdInstance
from tests.gateway.test_clients_tools import _call, _fail

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


@pytest.fixture(scope="module")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


@pytest.fixture(scope="module")
def gateway(sshd: SshdInstance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [
            {"name": "sudo", "host": sshd.alias("sudo")},
            {"name": "plain", "host": sshd.alias("plain")},
        ],
        "root": {"targets": ["sudo"], "agent": True},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
    }
    with run_gateway(tmp_path_factory.mktemp("gw-insp-root"), config) as gw:
        yield gw


def test_root_commands_from_separate_inspector_sessions_share_one_uid_0_root_agent(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path
) -> None:
    probe = [
        "sh",
        "-c",
        'id -u; read -r _ _ _ agent _ < /proc/$PPID/stat; echo "$agent"',
    ]  # the uid and the agent's pid (the grandparent)
    first = _call(inspector, gateway, tmp_path, "remote_root_exec", target="sudo", argv=probe)
    second = _call(inspector, gateway, tmp_path, "remote_root_exec", target="sudo", argv=probe)
    uid, agent = first["stdout"].split()
    assert uid == "0"
    assert second["stdout"] == first["stdout"]  # the same root agent (its pid) ran both commands
    assert first["privilege"]["ran_as"] == "root"
    assert first["privilege"]["provider"] == "sudo_nopasswd"
    assert agent.isdigit()
    status = Path(f"/proc/{agent}/status").read_text()  # the target is this machine
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1] == "0"  # the agent's real uid


def test_a_root_command_over_its_time_limit_is_a_normal_result_through_the_inspector(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path
) -> None:
    slow = _call(
        inspector, gateway, tmp_path, "remote_root_exec", target="sudo", argv=["sleep", "30"], timeout_s=1
    )
    assert slow["timed_out"] is True
    assert slow["privilege"]["ran_as"] == "root"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"target": "plain", "argv": ["id", "-u"]}, "policy_denied"),  # not in root.targets
        ({"target": "nowhere", "argv": ["id", "-u"]}, "policy_denied"),  # not a configured target at all
        ({"target": "sudo", "argv": "id -u"}, "validation_error"),
    ],
)
def test_root_failures_reach_the_inspector_as_structured_errors(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path, args: dict[str, object], code: str
) -> None:
    assert _fail(inspector, gateway, tmp_path, "remote_root_exec", **args) == code
