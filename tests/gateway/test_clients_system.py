"""The MCP Inspector CLI (which validates ``structuredContent`` against each ``outputSchema``) drives the
system tools against the real gateway on the real sshd: each tool's success is accepted by the client and
each failure reaches it as its structured error code."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
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
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "system": {"process_list_max": 50},
        "tools": {"toolsets": ["inspect", "execute"]},
    }
    with run_gateway(tmp_path_factory.mktemp("gw-sys"), config) as gw:
        yield gw


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    directory = Path(tempfile.mkdtemp(prefix="rogsysi-", dir="/tmp"))
    program = directory / f"rogsi{os.getpid() % 100000}"
    shutil.copy("/bin/sleep", program)
    proc = subprocess.Popen([str(program), "300"], start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def test_the_inspector_accepts_each_system_tool_result_and_sees_each_failure_code(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    name = Path(str(sleeper.args[0])).name  # type: ignore[index]
    info = _call(inspector, gateway, tmp_path, "system_info", target="plain")
    assert info["cpu_count"] == os.cpu_count()
    listed = _call(inspector, gateway, tmp_path, "process_list", target="plain", names=[name])
    [record] = listed["processes"]
    assert record["pid"] == sleeper.pid
    assert _call(inspector, gateway, tmp_path, "port_list", target="plain")["source"] == "ss"
    assert _call(inspector, gateway, tmp_path, "disk_usage", target="plain")["filesystems"]
    stale = {"target": "plain", "pid": sleeper.pid, "start_time": record["start_time"] - 10}
    assert _fail(inspector, gateway, tmp_path, "process_signal", **stale) == "conflict"
    assert sleeper.poll() is None
    root = {"target": "plain", "pid": sleeper.pid, "name": name, "privilege": "root"}
    assert _fail(inspector, gateway, tmp_path, "process_signal", **root) == "policy_denied"
    assert _fail(inspector, gateway, tmp_path, "system_info", target="elsewhere") == "policy_denied"
    assert _fail(inspector, gateway, tmp_path, "process_list", target="plain", limit=51) == "validation_error"
    assert _fail(inspector, gateway, tmp_path, "port_list", target="plain", source="x") == "validation_error"
    missing = {"target": "plain", "path": "/nonexistent-rog-path"}
    assert _fail(inspector, gateway, tmp_path, "disk_usage", **missing) == "not_found"
    assert _fail(inspector, gateway, tmp_path, "gpu_info", target="plain") == "missing_remote_capability"
