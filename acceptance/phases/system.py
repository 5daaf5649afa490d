"""``system``: the inspection tools and ``process_signal`` through a gateway of the phase's own over MCP/HTTP,
against the run's real sshd on both carriers (targets ``agent`` and ``ssh``: the same plain sshd user), each
answer checked against what the phase started, opened or reads locally (the target is this machine): a
known process (pid, ppid, user, exact start time, argv), a known listener, a known file tree, this
machine's identity (/proc, os-release), a fake ``nvidia-smi`` on ro-nopy's PATH and its absence; then a
root-owned process signalled from the NOPASSWD sudo target: a stale start time is ``conflict`` and nothing
is sent, ``privilege: user`` is ``privilege_error``, ``auto`` escalates after EPERM and kills exactly it.
Figures: each read tool's latency per carrier."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from acceptance._mcp import error_code, error_of, structured
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import ms_figures, own_gateway_config, running, shared_dir, timed
from remoteops.system.parse import parse_os_release

__all__ = ["system"]

CARRIERS = ("agent", "ssh")
READS = ("system_info", "process_list", "port_list", "disk_usage", "gpu_info")
# nvidia-smi 535's answer to the query gpu_info sends (", " separated, no header, no units)
FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version*)
    echo '0, NVIDIA A100-SXM4-40GB, GPU-5d2c7a1e-0000-1111-2222-333344445555, 40960, 1234, 37, 52, 535.1' ;;
  *) exit 9 ;;
esac
"""


def _read(path: str) -> str:
    return Path(path).read_text()


def _start_time(pid: int) -> float:
    """What process_list must report: btime + /proc/PID/stat starttime / CLK_TCK (to the hundredth)."""
    starttime = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    btime = next(
        int(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines() if x.startswith("btime")
    )
    return round(btime + starttime / os.sysconf("SC_CLK_TCK"), 2)


def _sleeper(ctx: PhaseContext, work: Path) -> subprocess.Popen[bytes]:
    """A root-owned ``sleep`` under a unique command name (in ``work``, a run marker), killed and reaped
    with the phase's stack and checked gone."""
    program = work / f"rogsys{os.getpid() % 10000}"
    shutil.copy("/bin/sleep", program)
    proc = subprocess.Popen([str(program), "300"], start_new_session=True)

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    ctx.stack.callback(stop)
    ctx.created(f"the phase's sleeper {proc.pid} is gone", lambda: proc.poll() is not None)
    return proc


def _tree(work: Path) -> Path:
    tree = work / "tree"
    for child, size in (("big", 512 * 1024), ("mid", 128 * 1024), ("small", 16 * 1024)):
        (tree / child).mkdir(parents=True)
        (tree / child / "data").write_bytes(os.urandom(size))
    tree.chmod(0o755)
    return tree


async def _reads(
    ctx: PhaseContext, call: Any, carrier: str, proc: subprocess.Popen[bytes], tree: Path
) -> None:
    """Every read tool on one carrier, checked against this machine."""
    name = Path(str(proc.args[0])).name  # type: ignore[index]
    info = structured(await call("system_info", {"target": carrier}))
    local_os = parse_os_release(_read("/etc/os-release").splitlines())
    facts = (info["hostname"], info["kernel"], info["boot_id"], info["cpu_count"], info["os"]["id"])
    want = (
        socket.gethostname(),
        os.uname().release,
        _read("/proc/sys/kernel/random/boot_id").strip(),
        os.sysconf("SC_NPROCESSORS_ONLN"),
        local_os.id,
    )
    ctx.check(facts == want, f"{carrier}: system_info {facts} is not this machine's {want}")

    listed = structured(await call("process_list", {"target": carrier, "names": [name]}))
    records = [(p["pid"], p["ppid"], p["user"], p["start_time"], p["argv"]) for p in listed["processes"]]
    mine = (proc.pid, os.getpid(), "root", _start_time(proc.pid), [str(proc.args[0]), "300"])  # type: ignore[index]
    ctx.check(records == [mine], f"{carrier}: process_list by name gave {records}, want {[mine]}")
    newest = structured(await call("process_list", {"target": carrier, "sort": "start", "limit": 3}))
    starts = [p["start_time"] for p in newest["processes"]]
    ctx.check(
        len(starts) == 3 and starts == sorted(starts, reverse=True) and newest["truncated"],
        f"{carrier}: newest 3: {newest['matched']} matched, starts {starts}",
    )

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        for source in ("auto", "proc"):
            ports = structured(await call("port_list", {"target": carrier, "source": source}))
            found = [(s["protocol"], s["address"], s["pid"]) for s in ports["sockets"] if s["port"] == port]
            ctx.check(
                (ports["source"], found)
                == ("ss" if source == "auto" else "proc", [("tcp", "127.0.0.1", None)]),
                f"{carrier}: port_list {source} ({ports['source']}) shows the phase's listener as {found} "
                "(root's: its owner is not visible to the login user)",
            )

    disk = structured(await call("disk_usage", {"target": carrier, "path": str(tree), "top_n": 2}))
    breakdown = disk["breakdown"]
    children = [(c["path"].rsplit("/", 1)[1], c["bytes"] >= size) for c, size in
                zip(breakdown["children"], (512 * 1024, 128 * 1024), strict=False)]  # fmt: skip
    ctx.check(
        children == [("big", True), ("mid", True)] and breakdown["complete"] is True,
        f"{carrier}: disk_usage top 2 of the known tree: {breakdown}",
    )
    bounded = structured(await call("disk_usage", {"target": carrier, "path": str(tree), "max_entries": 3}))
    got = {k: bounded["breakdown"][k] for k in ("complete", "cut_by", "entries", "total_bytes")}
    ctx.check(
        got == {"complete": False, "cut_by": "max_entries", "entries": 3, "total_bytes": None},
        f"{carrier}: disk_usage stopped at 3 entries: {got}",
    )
    ctx.check(
        any(fs["mount"] == "/" and fs["size_bytes"] > fs["used_bytes"] > 0 for fs in disk["filesystems"]),
        f"{carrier}: no sane / in {disk['filesystems']}",
    )
    if shutil.which("nvidia-smi") is None:
        absent = await call("gpu_info", {"target": carrier})
        ctx.check(error_code(absent) == "missing_remote_capability", f"{carrier}: gpu_info here: {absent}")


async def _latency(ctx: PhaseContext, call: Any, carrier: str, tree: Path) -> None:
    args: dict[str, dict[str, Any]] = {
        "system_info": {},
        "process_list": {},
        "port_list": {},
        "disk_usage": {"path": str(tree)},
        "gpu_info": {},
    }
    for tool in READS:
        samples = []
        for _ in range(ctx.n(5, 50)):
            result, ms = await timed(call(tool, {"target": carrier, **args[tool]}))
            ok = error_code(result) is None or (tool == "gpu_info" and shutil.which("nvidia-smi") is None)
            ctx.check(ok, f"{carrier}: {tool}: {result}")
            samples.append(ms)
        ctx.figures.update(ms_figures(f"{carrier}_{tool}", samples))


async def _signal(ctx: PhaseContext, call: Any, proc: subprocess.Popen[bytes]) -> None:
    started = _start_time(proc.pid)
    stale = await call("process_signal", {"target": "sudo", "pid": proc.pid, "signal": "KILL",
                                          "start_time": started - 0.01})  # fmt: skip
    actual = ((error_of(stale) or {}).get("details") or {}).get("actual", {})
    ctx.check(
        error_code(stale) == "conflict" and actual.get("start_time") == started,
        f"a stale start time: {stale}",
    )
    ctx.check(running(proc.pid), "after the refused signal the process still runs")
    as_user = await call("process_signal", {"target": "sudo", "pid": proc.pid, "signal": "KILL",
                                            "start_time": started, "privilege": "user"})  # fmt: skip
    ctx.check(error_code(as_user) == "privilege_error", f"privilege user on root's process: {as_user}")
    outside = await call("process_signal", {"target": "ssh", "pid": proc.pid, "signal": "KILL",
                                            "start_time": started, "privilege": "root"})  # fmt: skip
    ctx.check(error_code(outside) == "policy_denied", f"privilege root outside root.targets: {outside}")
    no_root = await call("process_signal", {"target": "sudo-noroot", "pid": proc.pid, "signal": "KILL",
                                            "start_time": started})  # fmt: skip
    ctx.check(
        error_code(no_root) == "privilege_error",
        f"auto on a sudo-capable target outside root.targets must not escalate: {no_root}",
    )
    ctx.check(running(proc.pid), "after the refused signals the process still runs")
    sent, ms = await timed(
        call("process_signal", {"target": "sudo", "pid": proc.pid, "signal": "KILL", "start_time": started})
    )
    out = structured(sent)
    privilege = out["privilege"]
    ctx.check(
        (out["pid"], out["start_time"], privilege["ran_as"], privilege["escalated_after_denial"])
        == (proc.pid, started, "root", True),
        f"auto after EPERM: {out}",
    )
    ctx.check(proc.wait(timeout=10) == -signal.SIGKILL, f"the sleeper ended with {proc.returncode}")
    ctx.figures["process_signal_escalated_ms"] = round(ms, 1)
    ctx.figures["process_signal_attempts"] = [
        f"{a['provider']}:{a['outcome']}" for a in privilege["attempts"]
    ]


async def _gpu(ctx: PhaseContext, call: Any) -> None:
    """A fake ``nvidia-smi`` on ro-nopy's PATH (the run's sshd gives that user a PATH of its own)."""
    env = ctx.env
    assert env.sshd is not None
    fake = env.sshd.workdir / "nopy-bin" / "nvidia-smi"
    fake.write_text(FAKE_SMI)
    fake.chmod(0o755)
    ctx.stack.callback(fake.unlink, True)
    ctx.created(f"the fake {fake} removed", lambda: not fake.exists())
    gpus = structured(await call("gpu_info", {"target": "nopy"}))["gpus"]
    ctx.check(
        [(g["index"], g["name"], g["memory_total_bytes"], g["driver_version"]) for g in gpus]
        == [(0, "NVIDIA A100-SXM4-40GB", 40960 * 2**20, "535.1")],
        f"gpu_info from the fake nvidia-smi: {gpus}",
    )
    fake.unlink()


@phase(
    "system",
    "system inspection on both carriers against known facts; process_signal identity",
    needs=("sshd",),
)
async def system(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    work = shared_dir(ctx, "rogasys-")
    work.chmod(0o755)
    tree = _tree(work)
    proc = _sleeper(ctx, work)
    targets = [{"name": c, "host": env.sshd.alias("plain"), "carrier": c} for c in CARRIERS]
    targets += [
        {"name": "sudo", "host": env.sshd.alias("sudo")},
        {"name": "sudo-noroot", "host": env.sshd.alias("sudo")},  # the same sudo user, not in root.targets
        {"name": "nopy", "host": env.sshd.alias("nopy")},
    ]
    config = own_gateway_config(
        env,
        targets,
        root={"targets": ["sudo"], "providers": ["sudo_nopasswd"]},
        tools={"toolsets": ["inspect", "execute"]},
    )
    gw = await ctx.stack.enter_async_context(env.extra_gateway("system", config))
    client = await ctx.stack.enter_async_context(env.client_of(gw))
    call = client.call
    for carrier in CARRIERS:
        await _reads(ctx, call, carrier, proc, tree)
    health = structured(await call("gateway_health", {}))
    carried = {c: health["transport"]["carriers"][c]["carrier"] for c in CARRIERS}
    ctx.check(carried == {c: c for c in CARRIERS}, f"the targets' carriers: {carried}")
    for carrier in CARRIERS:
        await _latency(ctx, call, carrier, tree)
    await _gpu(ctx, call)
    await _signal(ctx, call, proc)
