"""``RemoteOps.system`` against the real sshd on both carriers (agent and ssh). The target is this machine, so
each answer is checked against what the test itself started, opened or reads locally (/proc, os-release).

Users (tests/fixtures/sshd.py): ``ro-plain`` (no sudo), ``ro-sudo`` (NOPASSWD sudo), ``root``; ``ro-nopy``'s
sessions get a PATH of symlinks the test may extend (a fake ``nvidia-smi``, and ``python3`` for the agent)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from remoteops import (
    InspectPathNotFound,
    InvalidRequest,
    PrivilegeError,
    PrivilegeSettings,
    ProcessMismatch,
    ProcessNotFound,
    RemoteOps,
    SignalDenied,
    SystemCapabilityMissing,
    SystemRemoteError,
    TargetSpec,
    TransportSettings,
)
from remoteops.system.parse import parse_os_release
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

ROLES = ("plain", "sudo", "root", "nopy")

# nvidia-smi 535's answer to the query gpu_info sends, byte for byte in its format (", " separated, no
# header, no units, [N/A] where a field is not supported)
OLD_SS = """#!/bin/sh
echo "ss: invalid option -- 'O'" >&2
exit 255
"""
"""An ss from before ``-O`` (iproute2 < 4.20): refuses the option, as old ones do."""

FAKE_SMI = """#!/bin/sh
case "$*" in
  "--query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version \
--format=csv,noheader,nounits")
    echo '0, NVIDIA A100-SXM4-40GB, GPU-5d2c7a1e-0000-1111-2222-333344445555, 40960, 1234, 37, 52, 535.104.05'
    echo '1, Tesla T4, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 15360, 0, [N/A], 41, 535.104.05' ;;
  *) echo "unexpected arguments: $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture(params=["agent", "ssh"])
def carrier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _ops(sshd: SshdInstance, carrier: str) -> RemoteOps:
    transport = TransportSettings(
        ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir, carrier=carrier
    )
    targets = [TargetSpec(name=role, host=sshd.alias(role)) for role in ROLES]
    privilege = PrivilegeSettings(providers=("direct_root", "sudo_nopasswd"))
    return RemoteOps(transport, targets, privilege=privilege)


def _read(path: str) -> str:
    return Path(path).read_text()


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _start_time(pid: int) -> float:
    btime = next(
        int(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines() if x.startswith("btime")
    )
    return round(btime + int(_stat(pid)[19]) / os.sysconf("SC_CLK_TCK"), 2)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A root-owned process with a unique command name and a long argv, reaped at the end."""
    directory = Path(tempfile.mkdtemp(prefix="rogss-", dir="/tmp"))
    program = directory / f"rogsp{os.getpid() % 100000}"
    shutil.copy("/bin/sleep", program)
    proc = subprocess.Popen([str(program), "300", "0" * 200], start_new_session=True)  # sleep adds them up
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def tree() -> Iterator[Path]:
    """A known file tree every target user can read: three children of known sizes, one nested."""
    path = Path(tempfile.mkdtemp(prefix="rogst-", dir="/tmp"))
    path.chmod(0o755)
    for child, size in (("big", 768 * 1024), ("mid", 256 * 1024), ("small", 32 * 1024)):
        (path / child).mkdir()
        (path / child / "data").write_bytes(os.urandom(size))
    (path / "mid" / "deeper").mkdir()
    (path / "mid" / "deeper" / "more").write_bytes(os.urandom(64 * 1024))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nopy_path(sshd: SshdInstance) -> Iterator[Path]:
    """ro-nopy's PATH directory, with ``python3`` added for the test (the agent carrier needs it) and
    everything the test adds removed after it (the sshd is this worker's own)."""
    directory = sshd.workdir / "nopy-bin"
    python = directory / "python3"
    python.symlink_to("/usr/bin/python3")
    try:
        yield directory
    finally:
        python.unlink()
        (directory / "nvidia-smi").unlink(missing_ok=True)
        ss = directory / "ss"
        ss.unlink(missing_ok=True)
        ss.symlink_to("/usr/bin/ss")


async def _until(pid: int, event: int) -> None:
    """Until the child ``pid`` reports ``event`` (WSTOPPED or WCONTINUED) to its parent, this test: the
    kernel's notification, left in place (WNOWAIT), never a poll of /proc."""
    with anyio.fail_after(10):
        await anyio.to_thread.run_sync(os.waitid, os.P_PID, pid, event | os.WNOWAIT, abandon_on_cancel=True)


def _carried(ops: RemoteOps, target: str, carrier: str) -> None:
    assert ops.stats().carriers[target].carrier == carrier


async def test_system_info_matches_this_machine_on_either_carrier(sshd: SshdInstance, carrier: str) -> None:
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            info = await ops.system.info("plain")
        _carried(ops, "plain", carrier)
    local_os = parse_os_release(_read("/etc/os-release").splitlines())
    assert info.target == "plain"
    assert info.hostname == _read("/proc/sys/kernel/hostname").strip()
    assert info.kernel == os.uname().release
    assert info.arch == os.uname().machine
    assert info.boot_id == _read("/proc/sys/kernel/random/boot_id").strip()
    assert info.cpu_count == os.sysconf("SC_NPROCESSORS_ONLN")
    assert info.os == local_os.model_copy(update={"file": "/etc/os-release"})
    assert info.os.id
    assert info.os.pretty_name
    assert info.memory_total_bytes == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < info.memory_available_bytes <= info.memory_total_bytes
    assert 0 <= info.swap_free_bytes <= info.swap_total_bytes
    assert 0 < info.uptime_s <= float(_read("/proc/uptime").split()[0])
    assert all(load >= 0 for load in info.load_average)


async def test_process_list_finds_a_known_process_with_pid_ppid_user_start_time_and_capped_argv(
    sshd: SshdInstance, carrier: str, sleeper: subprocess.Popen[bytes]
) -> None:
    name = Path(str(sleeper.args[0])).name  # type: ignore[index]
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            found = await ops.system.processes("plain", names=[name])
            capped = await ops.system.processes("plain", names=[name], limit=10_000)
        _carried(ops, "plain", carrier)
    assert found.matched == 1
    assert not found.truncated
    [record] = found.processes
    assert record.pid == sleeper.pid
    assert record.ppid == os.getpid()
    assert (record.uid, record.user) == (0, "root")
    assert record.name == name
    assert record.state == "S"
    assert record.start_time == _start_time(sleeper.pid)
    assert record.rss_bytes > 0
    assert record.argv == [str(sleeper.args[0]), "300", "0" * 200]  # type: ignore[index]
    assert not record.argv_truncated
    [short] = capped.processes  # a limit of 10 000 leaves each record the smallest argv cap
    cap = ops.system.argv_cap(10_000)
    assert short.argv_truncated
    assert len("\0".join(short.argv).encode()) <= cap
    assert short.argv[0] == str(sleeper.args[0])  # type: ignore[index]


async def test_process_list_filters_by_pid_user_and_name_and_sorts_and_limits_on_the_target(
    sshd: SshdInstance, carrier: str, sleeper: subprocess.Popen[bytes]
) -> None:
    name = Path(str(sleeper.args[0])).name  # type: ignore[index]
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            by_pid = await ops.system.processes("plain", pids=[sleeper.pid, 1, 2**22 + 7])
            by_uid = await ops.system.processes("plain", users=["0"], names=[name])
            other_user = await ops.system.processes("plain", users=["ro-plain"], names=[name])
            unknown_user = await ops.system.processes("plain", users=["no-such-user-rog"])
            newest = await ops.system.processes("plain", sort="start", limit=5)
            memory = await ops.system.processes("plain", sort="memory", limit=20)
            by_pid_order = await ops.system.processes("plain", sort="pid", limit=3)
            two = await ops.system.processes("plain", limit=2)
            with pytest.raises(InvalidRequest) as bad_limit:
                await ops.system.processes("plain", limit=0)
            with pytest.raises(InvalidRequest) as bad_name:
                await ops.system.processes("plain", names=["a\nb"])
    assert sorted(p.pid for p in by_pid.processes) == [1, sleeper.pid]
    assert by_pid.matched == 2
    assert [p.pid for p in by_uid.processes] == [sleeper.pid]
    assert (other_user.matched, other_user.processes) == (0, [])
    assert (unknown_user.matched, unknown_user.processes) == (0, [])
    starts = [p.start_time for p in newest.processes]
    assert len(starts) == 5
    assert starts == sorted(starts, reverse=True)
    rss = [p.rss_bytes for p in memory.processes]
    assert rss == sorted(rss, reverse=True)
    assert [p.pid for p in by_pid_order.processes] == sorted(p.pid for p in by_pid_order.processes)
    assert by_pid_order.processes[0].pid == 1
    assert len(two.processes) == 2
    assert two.truncated
    assert two.matched > 2
    assert bad_limit.value.field == "limit"
    assert bad_name.value.field == "names[0]"


@pytest.mark.parametrize("source", ["auto", "proc"])
async def test_port_list_finds_a_known_listener_and_its_owner_where_visible(
    sshd: SshdInstance, carrier: str, source: str
) -> None:
    with socket.socket() as tcp, socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp.bind(("::1", 0))
        tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        async with _ops(sshd, carrier) as ops:
            with anyio.fail_after(60):
                as_root = await ops.system.ports("root", source=source)
                as_user = await ops.system.ports("plain", source=source)
            _carried(ops, "root", carrier)
    assert as_root.source == as_user.source == ("ss" if source == "auto" else "proc")
    mine = [(s.protocol, s.family, s.address, s.port, s.pid) for s in as_root.sockets if s.port == tcp_port]
    assert mine == [("tcp", "ipv4", "127.0.0.1", tcp_port, os.getpid())]
    dgram = [(s.protocol, s.family, s.address, s.pid) for s in as_root.sockets if s.port == udp_port]
    assert dgram == [("udp", "ipv6", "::1", os.getpid())]
    owner = next(s.process for s in as_root.sockets if s.port == tcp_port)
    assert owner == _read(f"/proc/{os.getpid()}/comm").strip()
    seen_by_user = [(s.port, s.pid) for s in as_user.sockets if s.port in (tcp_port, udp_port)]
    assert sorted(seen_by_user) == sorted([(tcp_port, None), (udp_port, None)])  # root's: owner not visible


async def test_port_list_falls_back_to_proc_naming_why_when_ss_is_too_old_or_missing(
    sshd: SshdInstance, carrier: str, nopy_path: Path
) -> None:
    ss = nopy_path / "ss"
    with socket.socket() as tcp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        port = tcp.getsockname()[1]
        async with _ops(sshd, carrier) as ops:
            with anyio.fail_after(60):
                current = await ops.system.ports("nopy")
                ss.unlink()
                ss.write_text(OLD_SS)
                ss.chmod(0o755)
                old = await ops.system.ports("nopy")
                with pytest.raises(SystemRemoteError) as failed:
                    await ops.system.ports("nopy", source="ss")
                ss.unlink()
                missing = await ops.system.ports("nopy")
                with pytest.raises(SystemCapabilityMissing) as absent:
                    await ops.system.ports("nopy", source="ss")
            _carried(ops, "nopy", carrier)
    assert (current.source, current.fallback) == ("ss", None)
    assert (old.source, old.fallback) == ("proc", "ss_failed")
    assert (missing.source, missing.fallback) == ("proc", "ss_missing")
    for listing in (current, old, missing):
        assert [(s.protocol, s.address) for s in listing.sockets if s.port == port] == [("tcp", "127.0.0.1")]
    assert (failed.value.stage, failed.value.exit_code) == ("ports", 255)
    assert absent.value.capability == "ss"


async def test_disk_usage_sizes_the_top_children_of_a_known_tree_within_its_bounds(
    sshd: SshdInstance, carrier: str, tree: Path
) -> None:
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            top2 = await ops.system.disk("plain", path=str(tree), top_n=2)
            every = await ops.system.disk("plain", path=str(tree) + "/")
            only_fs = await ops.system.disk("plain")
            cut = await ops.system.disk("root", path="/usr", top_n=3, limit_s=0.01)
        _carried(ops, "plain", carrier)
    local = os.statvfs("/")
    root_fs = next(fs for fs in only_fs.filesystems if fs.mount == "/")
    assert root_fs.size_bytes == local.f_blocks * local.f_frsize
    assert 0 < root_fs.used_bytes < root_fs.size_bytes
    assert root_fs.use_percent is not None
    assert only_fs.breakdown is None
    breakdown = top2.breakdown
    assert breakdown is not None
    assert breakdown.complete
    assert breakdown.cut_by is None
    assert not breakdown.unreadable
    assert [c.path for c in breakdown.children] == [str(tree / "big"), str(tree / "mid")]
    assert 768 * 1024 <= breakdown.children[0].bytes < 800 * 1024
    assert (256 + 64) * 1024 <= breakdown.children[1].bytes < 360 * 1024
    assert breakdown.total_bytes is not None
    assert breakdown.total_bytes >= (768 + 256 + 64 + 32) * 1024
    assert every.breakdown is not None
    assert [c.path.rsplit("/", 1)[1] for c in every.breakdown.children] == ["big", "mid", "small"]
    assert every.breakdown.total_bytes == breakdown.total_bytes
    assert breakdown.entries == 1 + 3 + 3 + 2  # the path, 3 directories and their files, deeper/ and more
    assert cut.breakdown is not None
    assert not cut.breakdown.complete
    assert cut.breakdown.cut_by == "time_limit"
    assert cut.breakdown.total_bytes is None
    assert len(cut.breakdown.children) <= 3


async def test_disk_usage_stops_its_walk_at_max_entries_and_says_so(
    sshd: SshdInstance, carrier: str, tree: Path
) -> None:
    many = tree / "many"
    many.mkdir()
    for index in range(300):
        (many / f"f{index}").write_bytes(b"x")
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            stopped = await ops.system.disk("plain", path=str(tree), max_entries=50)
            whole = await ops.system.disk("plain", path=str(tree), max_entries=1000)
            big = await ops.system.disk("root", path="/usr", max_entries=2000, limit_s=60)
            with pytest.raises(InvalidRequest) as bad:
                await ops.system.disk("plain", path=str(tree), max_entries=0)
    assert stopped.breakdown is not None
    assert (stopped.breakdown.complete, stopped.breakdown.cut_by) == (False, "max_entries")
    assert stopped.breakdown.entries == stopped.breakdown.max_entries == 50
    assert stopped.breakdown.total_bytes is None
    assert whole.breakdown is not None
    assert (whole.breakdown.complete, whole.breakdown.cut_by) == (True, None)
    assert whole.breakdown.entries == 1 + 3 + 3 + 2 + 1 + 300
    assert big.breakdown is not None
    assert (big.breakdown.cut_by, big.breakdown.entries) == ("max_entries", 2000)
    assert big.breakdown.children
    assert bad.value.field == "max_entries"


async def test_disk_usage_of_a_missing_path_or_an_unreadable_subtree_says_so(
    sshd: SshdInstance, carrier: str, tree: Path
) -> None:
    locked = tree / "small"
    locked.chmod(0o700)  # root's: ro-plain cannot enter it
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            with pytest.raises(InspectPathNotFound) as missing:
                await ops.system.disk("plain", path=str(tree / "nope"))
            partial = await ops.system.disk("plain", path=str(tree))
    assert missing.value.path == str(tree / "nope")
    assert partial.breakdown is not None
    assert partial.breakdown.unreadable
    assert partial.breakdown.complete
    assert [c.path for c in partial.breakdown.children][:2] == [str(tree / "big"), str(tree / "mid")]


async def test_gpu_info_reads_a_fake_nvidia_smi_on_the_path_and_its_absence_is_a_missing_capability(
    sshd: SshdInstance, carrier: str, nopy_path: Path
) -> None:
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            with pytest.raises(SystemCapabilityMissing) as absent:
                await ops.system.gpus("nopy")
            fake = nopy_path / "nvidia-smi"
            fake.write_text(FAKE_SMI)
            fake.chmod(0o755)
            info = await ops.system.gpus("nopy")
        _carried(ops, "nopy", carrier)
    assert absent.value.capability == "nvidia-smi"
    assert info.source == "nvidia-smi"
    first, second = info.gpus
    assert first.model_dump() == {
        "index": 0,
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-5d2c7a1e-0000-1111-2222-333344445555",
        "memory_total_bytes": 40960 * 1024 * 1024,
        "memory_used_bytes": 1234 * 1024 * 1024,
        "utilization_percent": 37.0,
        "temperature_c": 52.0,
        "driver_version": "535.104.05",
    }
    assert (second.index, second.name, second.memory_used_bytes) == (1, "Tesla T4", 0)
    assert second.utilization_percent is None


async def test_process_signal_refuses_a_changed_start_time_or_name_and_signals_the_matching_process(
    sshd: SshdInstance, carrier: str, sleeper: subprocess.Popen[bytes]
) -> None:
    started = _start_time(sleeper.pid)
    name = Path(str(sleeper.args[0])).name  # type: ignore[index]
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            listed = (await ops.system.processes("root", pids=[sleeper.pid])).processes[0]
            with pytest.raises(ProcessMismatch) as stale:
                await ops.system.signal("root", sleeper.pid, "KILL", start_time=started - 0.01)
            with pytest.raises(ProcessMismatch) as renamed:
                await ops.system.signal("root", sleeper.pid, "KILL", start_time=started, name="sshd")
            assert sleeper.poll() is None  # nothing was sent
            assert _stat(sleeper.pid)[0] == "S"
            stopped = await ops.system.signal("root", sleeper.pid, "STOP", start_time=listed.start_time)
            await _until(sleeper.pid, os.WSTOPPED)
            assert _stat(sleeper.pid)[0] == "T"
            await ops.system.signal("root", sleeper.pid, "CONT", name=name)
            killed = await ops.system.signal("root", sleeper.pid, "KILL", start_time=started, name=name)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        with anyio.fail_after(60):
            with pytest.raises(ProcessNotFound) as gone:
                await ops.system.signal("root", sleeper.pid, "TERM", start_time=started)
            with pytest.raises(InvalidRequest) as neither:
                await ops.system.signal("root", 1, "TERM")
        _carried(ops, "root", carrier)
    assert stale.value.pid == sleeper.pid
    assert stale.value.actual == {"start_time": started, "name": name}
    assert stale.value.expected["start_time"] == started - 0.01
    assert renamed.value.actual["name"] == name
    assert listed.start_time == started
    assert (stopped.pid, stopped.signal, stopped.name, stopped.start_time) == (
        sleeper.pid,
        "STOP",
        name,
        started,
    )
    assert killed.signal == "KILL"
    assert gone.value.pid == sleeper.pid
    assert neither.value.field == "start_time"


async def test_process_signal_auto_escalates_only_after_eperm_and_user_never_does(
    sshd: SshdInstance, carrier: str, sleeper: subprocess.Popen[bytes]
) -> None:
    started = _start_time(sleeper.pid)
    async with _ops(sshd, carrier) as ops:
        with anyio.fail_after(60):
            with pytest.raises(SignalDenied) as denied:
                await ops.system.signal("sudo", sleeper.pid, "STOP", start_time=started, privilege="user")
            with pytest.raises(PrivilegeError) as no_provider:  # ro-plain has no way to root
                await ops.system.signal("plain", sleeper.pid, "STOP", start_time=started, privilege="auto")
            assert _stat(sleeper.pid)[0] == "S"
            with pytest.raises(ProcessMismatch):  # escalated, the identity is checked again as root
                await ops.system.signal("sudo", sleeper.pid, "STOP", start_time=started + 1, privilege="auto")
            assert _stat(sleeper.pid)[0] == "S"
            escalated = await ops.system.signal("sudo", sleeper.pid, "STOP", start_time=started)
            await _until(sleeper.pid, os.WSTOPPED)
            assert _stat(sleeper.pid)[0] == "T"
            own = await ops.system.signal("root", sleeper.pid, "CONT", start_time=started)
            await _until(sleeper.pid, os.WCONTINUED)
        _carried(ops, "sudo", carrier)
    assert denied.value.pid == sleeper.pid
    assert [a.provider for a in no_provider.value.attempts][:1] == ["user"]
    report = escalated.privilege
    assert report is not None
    assert report.requested == "auto"
    assert report.escalated_after_denial
    assert report.ran_as == "root"
    assert report.provider == "sudo_nopasswd"
    assert next((a.provider, a.outcome) for a in report.attempts) == ("user", "denied")
    assert own.privilege is not None  # root's own signal needed no escalation
    assert not own.privilege.escalated_after_denial
    assert [a.provider for a in own.privilege.attempts] == []


async def test_each_read_is_one_ssh_run_on_the_ssh_carrier(sshd: SshdInstance, tree: Path) -> None:
    async with _ops(sshd, "ssh") as ops:
        with anyio.fail_after(60):
            await ops.system.info("plain")  # the master is up
            reads: dict[str, Callable[[], Awaitable[object]]] = {
                "info": lambda: ops.system.info("plain"),
                "processes": lambda: ops.system.processes("plain"),
                "ports": lambda: ops.system.ports("plain"),
                "disk": lambda: ops.system.disk("plain", path=str(tree)),
            }
            runs = {}
            for stage, read in reads.items():
                before = ops.stats().runs
                await read()
                runs[stage] = ops.stats().runs - before
    assert runs == {"info": 1, "processes": 1, "ports": 1, "disk": 1}
