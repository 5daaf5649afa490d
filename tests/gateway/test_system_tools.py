"""The system tools end to end in process: MCP client → gateway → real sshd (the target is this machine, so
each answer is checked against what the test itself started or reads locally)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from gateway._dispatch import error_payload
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

ROLES = ("plain", "sudo", "root", "nopy")

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version*)
    echo '0, NVIDIA A100-SXM4-40GB, GPU-5d2c7a1e-0000-1111-2222-333344445555, 40960, 1234, 37, 52, 535.104.05'
    echo '1, Tesla T4, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 15360, 0, [N/A], 41, 535.104.05' ;;
  *) exit 9 ;;
esac
"""


def _settings(sshd: SshdInstance, root_targets: tuple[str, ...] = ("sudo",)) -> dict[str, Any]:
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": role, "host": sshd.alias(role)} for role in ROLES],
        "root": {"targets": list(root_targets), "providers": ["direct_root", "sudo_nopasswd"]},
        "tools": {"toolsets": ["inspect", "execute"]},
    }


async def _call(
    client: Client, tool: str, **args: Any
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(structuredContent, None) or (None, the structured error)."""
    with anyio.fail_after(60):
        result = await client.call_tool(tool, args)
    if result.is_error:
        return None, error_payload(result)
    return result.structured_content, None


def _start_time(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    starttime = int(stat.rsplit(")", 1)[1].split()[19])
    btime = next(
        int(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines() if x.startswith("btime")
    )
    return round(btime + starttime / os.sysconf("SC_CLK_TCK"), 2)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A short directory every target user can read (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogsysd-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A root-owned process with a unique command name, reaped at the end."""
    directory = Path(tempfile.mkdtemp(prefix="rogsys-", dir="/tmp"))
    program = directory / f"rogsl{os.getpid() % 100000}"
    shutil.copy("/bin/sleep", program)
    proc = subprocess.Popen([str(program), "300"], start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


async def test_system_info_reports_this_machine_typed(
    sshd: SshdInstance, gateway_client: ClientFactory
) -> None:
    async with gateway_client(**_settings(sshd)) as (client, _):
        out, error = await _call(client, "system_info", target="plain")
    assert error is None
    assert out is not None
    assert out["hostname"] == socket.gethostname()
    assert out["boot_id"] == _boot_id()
    assert out["cpu_count"] == os.cpu_count()
    assert out["kernel"] == os.uname().release
    assert out["arch"] == os.uname().machine
    assert out["os"]["id"]
    assert 0 < out["memory_available_bytes"] <= out["memory_total_bytes"]
    assert out["uptime_s"] > 0
    assert len(out["load_average"]) == 3


async def test_process_list_finds_a_known_process_with_its_exact_start_time_and_filters_and_sorts(
    sshd: SshdInstance, gateway_client: ClientFactory, sleeper: subprocess.Popen[bytes]
) -> None:
    name = Path(sleeper.args[0]).name  # type: ignore[index]
    async with gateway_client(**_settings(sshd)) as (client, _):
        by_name, error = await _call(client, "process_list", target="plain", names=[name])
        by_pid, _ = await _call(client, "process_list", target="plain", pids=[sleeper.pid, 1])
        by_user, _ = await _call(client, "process_list", target="plain", users=["ro-plain"], names=[name])
        newest, _ = await _call(client, "process_list", target="root", sort="start", limit=5)
        memory, _ = await _call(client, "process_list", target="root", sort="memory", limit=20)
        small, _ = await _call(client, "process_list", target="plain", limit=2)
        over, too_many = await _call(client, "process_list", target="plain", limit=5000)
    assert error is None
    assert by_name is not None
    [record] = by_name["processes"]
    assert record["pid"] == sleeper.pid
    assert record["start_time"] == _start_time(sleeper.pid)
    assert record["user"] == "root"
    assert record["uid"] == 0
    assert record["argv"] == [sleeper.args[0], "300"]  # type: ignore[index]
    assert record["ppid"] == os.getpid()
    assert by_pid is not None
    assert sorted(p["pid"] for p in by_pid["processes"]) == [1, sleeper.pid]
    assert by_user is not None
    assert by_user["processes"] == []
    assert by_user["matched"] == 0
    assert newest is not None
    starts = [p["start_time"] for p in newest["processes"]]
    assert starts == sorted(starts, reverse=True)
    assert memory is not None
    rss = [p["rss_bytes"] for p in memory["processes"]]
    assert rss == sorted(rss, reverse=True)
    assert small is not None
    assert len(small["processes"]) == 2
    assert small["truncated"]
    assert small["matched"] > 2
    assert over is None
    assert too_many is not None
    assert too_many["code"] == "validation_error"


@pytest.mark.parametrize("source", ["auto", "proc"])
async def test_port_list_finds_a_known_loopback_listener_with_its_pid(
    sshd: SshdInstance, gateway_client: ClientFactory, source: str
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        async with gateway_client(**_settings(sshd)) as (client, _):
            as_root, error = await _call(client, "port_list", target="root", source=source)
            as_user, _ = await _call(client, "port_list", target="plain", source=source)
    assert error is None
    assert as_root is not None
    assert as_user is not None
    assert as_root["source"] == ("ss" if source == "auto" else "proc")
    mine = [s for s in as_root["sockets"] if s["port"] == port]
    assert mine == [
        {
            "protocol": "tcp",
            "family": "ipv4",
            "address": "127.0.0.1",
            "port": port,
            "pid": os.getpid(),
            "process": mine[0]["process"],
        }
    ]
    seen_by_user = [s for s in as_user["sockets"] if s["port"] == port]
    assert len(seen_by_user) == 1
    assert seen_by_user[0]["pid"] is None


async def test_disk_usage_sizes_a_known_tree_and_reports_a_time_bound_cut(
    sshd: SshdInstance, gateway_client: ClientFactory, shared_dir: Path
) -> None:
    for child, size in (("big", 512 * 1024), ("mid", 128 * 1024), ("small", 16 * 1024)):
        (shared_dir / child).mkdir()
        (shared_dir / child / "data").write_bytes(os.urandom(size))
    async with gateway_client(**_settings(sshd)) as (client, _):
        out, error = await _call(client, "disk_usage", target="plain", path=str(shared_dir), top_n=2)
        cut, _ = await _call(client, "disk_usage", target="root", path="/usr", limit_s=0.01)
        missing, gone = await _call(client, "disk_usage", target="plain", path=str(shared_dir / "nope"))
    assert error is None
    assert out is not None
    assert any(fs["mount"] == "/" and fs["size_bytes"] > fs["used_bytes"] > 0 for fs in out["filesystems"])
    breakdown = out["breakdown"]
    assert [c["path"] for c in breakdown["children"]] == [str(shared_dir / "big"), str(shared_dir / "mid")]
    assert 512 * 1024 <= breakdown["children"][0]["bytes"] < 600 * 1024
    assert breakdown["total_bytes"] >= (512 + 128 + 16) * 1024
    assert breakdown["complete"] is True
    assert cut is not None
    assert cut["breakdown"]["complete"] is False
    assert cut["breakdown"]["cut_by"] == "time_limit"
    assert missing is None
    assert gone is not None
    assert gone["code"] == "not_found"


async def test_gpu_info_reads_nvidia_smi_where_it_is_and_says_missing_where_not(
    sshd: SshdInstance, gateway_client: ClientFactory
) -> None:
    fake = sshd.workdir / "nopy-bin" / "nvidia-smi"  # ro-nopy's PATH
    fake.write_text(FAKE_SMI)
    fake.chmod(0o755)
    try:
        async with gateway_client(**_settings(sshd)) as (client, _):
            out, error = await _call(client, "gpu_info", target="nopy")
            absent, missing = await _call(client, "gpu_info", target="plain")
    finally:
        fake.unlink()
    assert error is None
    assert out is not None
    first, second = out["gpus"]
    assert first == {
        "index": 0,
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-5d2c7a1e-0000-1111-2222-333344445555",
        "memory_total_bytes": 40960 * 1024 * 1024,
        "memory_used_bytes": 1234 * 1024 * 1024,
        "utilization_percent": 37.0,
        "temperature_c": 52.0,
        "driver_version": "535.104.05",
    }
    assert second["utilization_percent"] is None
    assert second["index"] == 1
    assert absent is None
    assert missing is not None
    assert missing["code"] == "missing_remote_capability"


async def test_process_signal_refuses_a_changed_start_time_and_signals_the_matching_process(
    sshd: SshdInstance, gateway_client: ClientFactory, sleeper: subprocess.Popen[bytes]
) -> None:
    started = _start_time(sleeper.pid)
    async with gateway_client(**_settings(sshd)) as (client, _):
        wrong, conflict = await _call(
            client, "process_signal", target="root", pid=sleeper.pid, start_time=started + 5
        )
        assert sleeper.poll() is None  # nothing was sent
        out, error = await _call(
            client, "process_signal", target="root", pid=sleeper.pid, start_time=started, signal="KILL"
        )
    assert wrong is None
    assert conflict is not None
    assert conflict["code"] == "conflict"
    assert conflict["details"]["actual"]["start_time"] == started
    assert error is None
    assert out is not None
    assert out["start_time"] == started
    assert out["signal"] == "KILL"
    assert sleeper.wait(timeout=10) == -signal.SIGKILL


async def test_process_signal_escalates_only_after_eperm_and_only_where_root_is_allowed(
    sshd: SshdInstance, gateway_client: ClientFactory, sleeper: subprocess.Popen[bytes]
) -> None:
    started = _start_time(sleeper.pid)
    args = {"pid": sleeper.pid, "start_time": started, "signal": "STOP"}
    async with gateway_client(**_settings(sshd, root_targets=("sudo",))) as (client, _):
        as_user, denied = await _call(client, "process_signal", target="sudo", privilege="user", **args)
        outside, policy = await _call(client, "process_signal", target="plain", privilege="root", **args)
        plain_auto, plain_denied = await _call(client, "process_signal", target="plain", **args)
        assert _state(sleeper.pid) == "S"
        out, error = await _call(client, "process_signal", target="sudo", **args)
    assert as_user is None
    assert denied is not None
    assert denied["code"] == "privilege_error"
    assert outside is None
    assert policy is not None
    assert policy["code"] == "policy_denied"
    assert plain_auto is None
    assert plain_denied is not None
    assert plain_denied["code"] == "privilege_error"
    assert error is None
    assert out is not None
    privilege = out["privilege"]
    assert privilege["requested"] == "auto"
    assert privilege["ran_as"] == "root"
    assert privilege["escalated_after_denial"] is True
    assert next(a["provider"] for a in privilege["attempts"]) == "user"
    assert privilege["provider"] == "sudo_nopasswd"
    assert _state(sleeper.pid) == "T"


async def test_process_signal_auto_never_escalates_on_a_target_outside_root_targets_even_with_sudo(
    sshd: SshdInstance, gateway_client: ClientFactory, sleeper: subprocess.Popen[bytes]
) -> None:
    args = {"pid": sleeper.pid, "start_time": _start_time(sleeper.pid), "signal": "STOP"}
    async with gateway_client(**_settings(sshd, root_targets=())) as (client, _):
        auto, denied = await _call(client, "process_signal", target="sudo", **args)  # ro-sudo: NOPASSWD
        root, policy = await _call(client, "process_signal", target="sudo", privilege="root", **args)
    assert auto is None
    assert denied is not None
    assert denied["code"] == "privilege_error"
    assert root is None
    assert policy is not None
    assert policy["code"] == "policy_denied"
    assert _state(sleeper.pid) == "S"
