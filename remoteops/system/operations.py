"""Inspect a target's system and signal one of its processes: :class:`RemoteSystem`.

Each operation is one POSIX sh program on stdin (``sh -s -- ARGS``, arguments plain data), so one round
trip over whichever carrier the target uses (its agent or one ssh process); output is bounded by the
transport's output cap, which the programs respect (a process list's argv cap shrinks with its limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import anyio

from remoteops._errors import CommandTimeout, InvalidRequest
from remoteops._models import ExecResult
from remoteops._sh import program
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode
from remoteops.requests import check_text, check_time_limit
from remoteops.system.errors import (
    InspectPathNotFound,
    ProcessMismatch,
    ProcessNotFound,
    SignalDenied,
    SystemCapabilityMissing,
    SystemRemoteError,
)
from remoteops.system.models import (
    DiskUsageReport,
    GpuInfo,
    PathBreakdown,
    PortFallback,
    PortList,
    ProcessList,
    ProcessSort,
    SignalName,
    SignalResult,
    SystemInfo,
)
from remoteops.system.parse import (
    parse_df,
    parse_du,
    parse_gpus,
    parse_os_release,
    parse_proc_sockets,
    parse_processes,
    parse_sections,
    parse_ss,
    start_epoch,
)

__all__ = ["MAX_DISK_ENTRIES", "SIGNALS", "RemoteSystem", "SystemRunner"]

INFO_SCRIPT = program(__package__, "info.sh")
PROCS_SCRIPT = program(__package__, "procs.sh")
PORTS_SCRIPT = program(__package__, "ports.sh")
DISK_SCRIPT = program(__package__, "disk.sh")
GPU_SCRIPT = program(__package__, "gpu.sh")
SIGNAL_SCRIPT = program(__package__, "signal.sh")

SIGNALS: tuple[SignalName, ...] = ("TERM", "INT", "HUP", "KILL", "USR1", "USR2", "STOP", "CONT")
_GRACE_S = 10.0
_PROGRAM_LIMIT_S = 30.0
_MAX_PROCESSES = 10_000
_MAX_FILTER = 256
MAX_DISK_ENTRIES = 5_000_000
_PROC_WHY: dict[str, PortFallback | None] = {
    "asked": None,
    "ss-missing": "ss_missing",
    "ss-failed": "ss_failed",
}


class SystemRunner(Protocol):
    """What system inspection asks of the facade: commands on a target, with the privilege choice point
    (``user`` never escalates, ``auto`` only after an observed denial, ``root`` at once)."""

    async def run(
        self,
        target: str,
        argv: Sequence[str] | None = None,
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        privilege: PrivilegeMode = "user",
        secrets: SecretSource | None = None,
    ) -> ExecResult: ...


def _lines(values: Sequence[str] | Sequence[int] | None, field: str, target: str) -> str:
    """A filter list as one argument word: its items one per line ("-": no filter)."""
    if values is None:
        return "-"
    if len(values) > _MAX_FILTER:
        raise InvalidRequest(target=target, field=field, reason=f"at most {_MAX_FILTER} items")
    words = [str(v) for v in values]
    for index, word in enumerate(words):
        check_text(f"{field}[{index}]", word, target=target)
        if not word or "\n" in word:
            raise InvalidRequest(target=target, field=f"{field}[{index}]", reason="one non-empty line")
    return "\n".join(words) if words else "\n"


class RemoteSystem:
    """System inspection and process signalling on configured targets (``RemoteOps.system``)."""

    def __init__(self, runner: SystemRunner, *, output_cap_bytes: int, ceiling_s: float) -> None:
        self._runner = runner
        self._cap = output_cap_bytes
        self._ceiling_s = ceiling_s

    async def _program(
        self,
        target: str,
        stage: str,
        script: str,
        args: Sequence[str] = (),
        *,
        limit_s: float = _PROGRAM_LIMIT_S,
        privilege: PrivilegeMode = "user",
        secrets: SecretSource | None = None,
    ) -> ExecResult:
        limit = min(limit_s, self._ceiling_s)
        bound = limit + _GRACE_S
        try:
            with anyio.fail_after(bound):
                result = await self._runner.run(
                    target,
                    ["sh", "-s", "--", *args],
                    stdin=script.encode(),
                    timeout_s=limit,
                    privilege=privilege,
                    secrets=secrets,
                )
        except TimeoutError:
            raise CommandTimeout(
                f"no answer from the {stage} program within {bound:.0f}s",
                target=target,
                time_limit_s=limit,
                remote_killed=False,
            ) from None
        if result.timed_out:
            raise CommandTimeout(
                f"the {stage} program hit its time limit",
                target=target,
                time_limit_s=limit,
                remote_killed=result.remote_killed,
            )
        return result

    def _failed(self, target: str, stage: str, result: ExecResult) -> SystemRemoteError:
        tail = result.stderr.strip()[-300:]
        return SystemRemoteError(
            f"the {stage} program exited {result.exit_code}: {tail}",
            target=target,
            stage=stage,
            exit_code=result.exit_code,
        )

    async def info(self, target: str) -> SystemInfo:
        """Hostname, OS, kernel, architecture, uptime, load, CPUs, memory and swap, boot id."""
        result = await self._program(target, "info", INFO_SCRIPT)
        s = parse_sections(result.stdout)
        if "end" not in s:
            raise self._failed(target, "info", result)
        mem: dict[str, int] = {}
        for line in s.get("meminfo", []):
            key, _, value = line.partition(":")
            words = value.split()
            if words and words[0].isdigit():
                mem[key] = int(words[0]) * (1024 if words[1:] == ["kB"] else 1)
        try:
            load = s["loadavg"][0].split()
            return SystemInfo(
                target=target,
                hostname=s["hostname"][0].strip(),
                os=parse_os_release(s.get("os_release", [])).model_copy(
                    update={"file": next(iter(s.get("os_release_file", [])), "").strip() or None}
                ),
                kernel=s["kernel"][0].strip(),
                arch=s["arch"][0].strip(),
                uptime_s=float(s["uptime"][0].split()[0]),
                load_average=(float(load[0]), float(load[1]), float(load[2])),
                cpu_count=int(s["ncpu"][0]),
                memory_total_bytes=mem["MemTotal"],
                memory_available_bytes=mem.get("MemAvailable", mem.get("MemFree", 0)),
                swap_total_bytes=mem.get("SwapTotal", 0),
                swap_free_bytes=mem.get("SwapFree", 0),
                boot_id=s["boot_id"][0].strip(),
            )
        except (KeyError, IndexError, ValueError):
            raise self._failed(target, "info", result) from None

    def argv_cap(self, limit: int) -> int:
        """Bytes of each process's command line a list of ``limit`` processes may carry (base64, within
        the output cap with room for the other fields)."""
        return max(64, min(4096, ((self._cap - 4096) * 3 // 4) // max(limit, 1) - 160))

    async def processes(
        self,
        target: str,
        *,
        limit: int = 100,
        sort: ProcessSort = "cpu",
        users: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        pids: Sequence[int] | None = None,
    ) -> ProcessList:
        """The processes matching every filter given (user names or uids, command names, PIDs), sorted
        (cpu, memory, start: newest first; pid: ascending), at most ``limit`` of them."""
        if not 1 <= limit <= _MAX_PROCESSES:
            raise InvalidRequest(target=target, field="limit", reason=f"must be in [1, {_MAX_PROCESSES}]")
        cap = self.argv_cap(limit)
        args = [
            sort,
            str(limit),
            str(cap),
            _lines(names, "names", target),
            _lines(users, "users", target),
            _lines(pids, "pids", target),
        ]
        result = await self._program(target, "processes", PROCS_SCRIPT, args)
        if result.exit_code != 0 or not result.stdout.startswith("H "):
            raise self._failed(target, "processes", result)
        records, matched = parse_processes(result.stdout, cap)
        return ProcessList(
            target=target, sort=sort, matched=matched, truncated=matched > len(records), processes=records
        )

    async def ports(self, target: str, *, source: str = "auto") -> PortList:
        """Listening TCP and UDP sockets: ``ss`` where the target has it and it answers (``source="auto"``),
        else /proc, with ``fallback`` saying why (ss missing, or failing: too old for ``-H``/``-O``)."""
        if source not in ("auto", "ss", "proc"):
            raise InvalidRequest(target=target, field="source", reason="auto, ss or proc")
        result = await self._program(target, "ports", PORTS_SCRIPT, [source])
        head, _, body = result.stdout.partition("\n")
        if head == "S none":
            raise SystemCapabilityMissing("ss is not on the target's PATH", target=target, capability="ss")
        if head.startswith("S failed ") and head[9:].isdigit():
            raise self._failed(target, "ports", result.model_copy(update={"exit_code": int(head[9:])}))
        if head == "S ss" and result.exit_code == 0:
            return PortList(target=target, source="ss", sockets=parse_ss(body))
        why = head.removeprefix("S proc ")
        if why in _PROC_WHY and result.exit_code == 0:
            return PortList(
                target=target, source="proc", fallback=_PROC_WHY[why], sockets=parse_proc_sockets(body)
            )
        raise self._failed(target, "ports", result)

    async def disk(
        self,
        target: str,
        *,
        path: str | None = None,
        top_n: int = 20,
        limit_s: float = 10.0,
        max_entries: int = 200_000,
    ) -> DiskUsageReport:
        """Filesystems (``df -P -B1 -T``) and, for ``path``, its largest direct children on the same
        filesystem (``find -xdev``, hard links once), the walk stopped after ``limit_s`` or ``max_entries``
        entries (then ``complete`` is false and ``cut_by`` says which)."""
        if path is not None:
            check_text("path", path, target=target)
            if not path or path == "-" or "\n" in path:
                raise InvalidRequest(target=target, field="path", reason="a path of one line")
        if not 1 <= top_n <= 1000:
            raise InvalidRequest(target=target, field="top_n", reason="must be in [1, 1000]")
        if not 1 <= max_entries <= MAX_DISK_ENTRIES:
            raise InvalidRequest(
                target=target, field="max_entries", reason=f"must be in [1, {MAX_DISK_ENTRIES}]"
            )
        check_time_limit(limit_s, min(self._ceiling_s, 300.0), field="limit_s", target=target)
        args = ["-" if path is None else path, str(top_n), f"{limit_s:g}", str(max_entries)]
        result = await self._program(target, "disk", DISK_SCRIPT, args, limit_s=limit_s + 20)
        lines = result.stdout.splitlines()
        if not lines or lines[0] != "D":
            raise self._failed(target, "disk", result)
        marker = next((i for i, line in enumerate(lines) if line.startswith("X ")), len(lines))
        filesystems = parse_df(lines[1:marker])
        if not filesystems:
            raise self._failed(target, "disk", result)
        breakdown = None
        if path is not None:
            if marker == len(lines):
                raise self._failed(target, "disk", result)
            if lines[marker] == "X missing":
                raise InspectPathNotFound(f"{path!r} does not exist", target=target, path=path)
            rest = lines[marker + 1 :]
            rc_line = next((x for x in rest if x.startswith("R ")), "R -1")
            entries_line = next((x for x in rest if x.startswith("E ")), "").split()
            blob = next((x for x in rest if " " not in x), "")
            rc = int(rc_line[2:]) if rc_line[2:].lstrip("-").isdigit() else -1
            if len(entries_line) != 3 or not all(w.isdigit() for w in entries_line[1:]):
                raise self._failed(target, "disk", result)
            entries, entry_cut = int(entries_line[1]), entries_line[2] == "1"
            total, children = parse_du(blob, path)
            time_cut = rc in (124, 137)
            if rc not in (0, 1) and not time_cut and not entry_cut:
                raise self._failed(target, "disk", result)
            cut_by: Literal["time_limit", "max_entries"] | None = (
                "time_limit" if time_cut else "max_entries" if entry_cut else None
            )
            breakdown = PathBreakdown(
                path=path,
                total_bytes=None if cut_by else total,
                children=children[:top_n],
                top_n=top_n,
                entries=entries,
                max_entries=max_entries,
                complete=cut_by is None,
                cut_by=cut_by,
                unreadable=rc == 1,
            )
        return DiskUsageReport(target=target, filesystems=filesystems, breakdown=breakdown)

    async def gpus(self, target: str) -> GpuInfo:
        """Each NVIDIA GPU (``nvidia-smi --query-gpu``); no nvidia-smi is :class:`SystemCapabilityMissing`."""
        result = await self._program(target, "gpu", GPU_SCRIPT)
        lines = result.stdout.splitlines()
        if lines[:1] == ["G missing"]:
            raise SystemCapabilityMissing(
                "nvidia-smi is not on the target's PATH", target=target, capability="nvidia-smi"
            )
        if lines[:1] != ["G ok"] or not lines[-1].startswith("R "):
            raise self._failed(target, "gpu", result)
        if lines[-1] != "R 0":
            raise self._failed(target, "gpu", result)
        return GpuInfo(target=target, gpus=parse_gpus(lines[1:-1]))

    async def signal(
        self,
        target: str,
        pid: int,
        signal: SignalName,
        *,
        start_time: float | None = None,
        name: str | None = None,
        privilege: PrivilegeMode = "auto",
        secrets: SecretSource | None = None,
    ) -> SignalResult:
        """Send ``signal`` to ``pid`` only if it is still the process the caller saw: its start time (as
        :meth:`processes` gave it) and/or its command name. Checked and sent in one remote step; a
        mismatch is :class:`ProcessMismatch` and nothing is sent."""
        if signal not in SIGNALS:
            raise InvalidRequest(target=target, field="signal", reason=f"one of {', '.join(SIGNALS)}")
        if pid < 1:
            raise InvalidRequest(target=target, field="pid", reason="must be a positive PID")
        if start_time is None and name is None:
            raise InvalidRequest(target=target, field="start_time", reason="give start_time or name")
        if name is not None:
            check_text("name", name, target=target)
            if not name or "\n" in name:
                raise InvalidRequest(target=target, field="name", reason="a command name of one line")
        args = [str(pid), signal, "-" if start_time is None else f"{start_time:.6f}", name or "-"]
        result = await self._program(
            target, "signal", SIGNAL_SCRIPT, args, privilege=privilege, secrets=secrets
        )
        words = result.stdout.strip().split(" ", 5)
        if result.exit_code != 0 or words[:1] != ["K"] or len(words) < 2:
            if result.exit_code != 0 and privilege == "user" and "not permitted" in result.stderr.lower():
                denial = result.stderr.strip().splitlines()[-1][:200]
                raise SignalDenied(
                    f"the login user may not signal {pid}: {denial}", target=target, pid=pid, denial=denial
                )
            raise self._failed(target, "signal", result)
        if words[1] == "gone":
            raise ProcessNotFound(f"no process {pid}", target=target, pid=pid)
        if len(words) != 6 or not all(w.isdigit() for w in words[2:5]):
            raise self._failed(target, "signal", result)
        started = start_epoch(int(words[3]), int(words[2]), int(words[4]))
        actual_name = words[5]
        if words[1] == "mismatch":
            raise ProcessMismatch(
                f"process {pid} is not the process seen (recycled PID?): nothing was sent",
                target=target,
                pid=pid,
                expected={"start_time": start_time, "name": name},
                actual={"start_time": started, "name": actual_name},
            )
        if words[1] != "sent":
            raise self._failed(target, "signal", result)
        return SignalResult(
            target=target,
            pid=pid,
            signal=signal,
            name=actual_name,
            start_time=started,
            privilege=result.privilege,
        )
