"""Records of system inspection (``remoteops.system.operations``). Sizes are bytes, times epoch seconds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from remoteops.privilege.models import PrivilegeReport

__all__ = [
    "DirectoryEntry",
    "DiskUsageReport",
    "Filesystem",
    "GpuDevice",
    "GpuInfo",
    "ListeningSocket",
    "OsRelease",
    "PathBreakdown",
    "PortFallback",
    "PortList",
    "ProcessList",
    "ProcessRecord",
    "ProcessSort",
    "SignalName",
    "SignalResult",
    "SystemInfo",
]

_FROZEN = ConfigDict(frozen=True)

ProcessSort = Literal["cpu", "memory", "start", "pid"]
PortFallback = Literal["ss_missing", "ss_failed"]
SignalName = Literal["TERM", "INT", "HUP", "KILL", "USR1", "USR2", "STOP", "CONT"]


class OsRelease(BaseModel):
    """``/etc/os-release`` (``/usr/lib/os-release``): the fields most asked for, and all of them."""

    model_config = _FROZEN

    id: str | None = None
    name: str | None = None
    version_id: str | None = None
    pretty_name: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    file: str | None = Field(
        None, description="The file read: /etc/os-release, else /usr/lib/os-release (None: neither)."
    )


class SystemInfo(BaseModel):
    model_config = _FROZEN

    target: str
    hostname: str
    os: OsRelease
    kernel: str
    arch: str
    uptime_s: float
    load_average: tuple[float, float, float]
    cpu_count: int
    memory_total_bytes: int
    memory_available_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int
    boot_id: str


class ProcessRecord(BaseModel):
    model_config = _FROZEN

    pid: int
    ppid: int
    uid: int
    user: str | None = Field(description="The uid's user name (None: not in the passwd database).")
    state: str = Field(description="The kernel's one-letter state (R, S, D, Z, T, I, ...).")
    name: str = Field(description="The kernel's command name (/proc/PID/stat comm, at most 15 bytes).")
    cpu_percent: float = Field(description="CPU time over the process's lifetime, like ps %CPU.")
    rss_bytes: int
    start_time: float = Field(
        description="Start, epoch seconds (boot time + /proc/PID/stat starttime); process_signal checks it."
    )
    argv: list[str] = Field(description="The command line (empty for kernel threads), capped.")
    argv_truncated: bool = False


class ProcessList(BaseModel):
    model_config = _FROZEN

    target: str
    sort: ProcessSort
    matched: int = Field(description="Processes matching the filters (at most limit of them are listed).")
    truncated: bool = Field(description="More processes matched than were listed.")
    processes: list[ProcessRecord]


class ListeningSocket(BaseModel):
    model_config = _FROZEN

    protocol: Literal["tcp", "udp"]
    family: Literal["ipv4", "ipv6"]
    address: str = Field(description="Local address: 0.0.0.0 / :: is every address; may carry %interface.")
    port: int
    pid: int | None = Field(description="The owning process, where visible (root sees all).")
    process: str | None = None


class PortList(BaseModel):
    model_config = _FROZEN

    target: str
    source: Literal["ss", "proc"] = Field(
        description="ss (-H -O -tulpn), or /proc/net/{tcp,tcp6,udp,udp6} with /proc/*/fd socket inodes."
    )
    fallback: PortFallback | None = Field(
        None,
        description="Why /proc was read under source=auto: ss_missing (no ss on the PATH), ss_failed (ss "
        "exited non-zero: too old for -H/-O); null when the source read is the one asked for.",
    )
    sockets: list[ListeningSocket]


class Filesystem(BaseModel):
    model_config = _FROZEN

    filesystem: str
    type: str
    size_bytes: int
    used_bytes: int
    available_bytes: int
    use_percent: int | None
    mount: str


class DirectoryEntry(BaseModel):
    model_config = _FROZEN

    path: str
    bytes: int


class PathBreakdown(BaseModel):
    """One path's walk (``find -xdev``: one filesystem, hard links once) summed per direct child, bounded
    in time and in entries."""

    model_config = _FROZEN

    path: str
    total_bytes: int | None = Field(description="The whole path (None: a bound cut the walk short).")
    children: list[DirectoryEntry] = Field(description="The largest children, largest first.")
    top_n: int
    entries: int = Field(description="Entries (files, directories, ...) the walk counted.")
    max_entries: int
    complete: bool = Field(
        description="False: a bound stopped the walk (cut_by); the sizes cover what it reached."
    )
    cut_by: Literal["time_limit", "max_entries"] | None = None
    unreadable: bool = Field(description="Some entries could not be read (their sizes are missing).")


class DiskUsageReport(BaseModel):
    model_config = _FROZEN

    target: str
    filesystems: list[Filesystem]
    breakdown: PathBreakdown | None = None


class GpuDevice(BaseModel):
    model_config = _FROZEN

    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    utilization_percent: float | None
    temperature_c: float | None
    driver_version: str | None


class GpuInfo(BaseModel):
    model_config = _FROZEN

    target: str
    source: Literal["nvidia-smi"] = "nvidia-smi"
    gpus: list[GpuDevice]


class SignalResult(BaseModel):
    model_config = _FROZEN

    target: str
    pid: int
    signal: SignalName
    name: str = Field(description="The command name of the process signalled.")
    start_time: float = Field(description="Its start time, epoch seconds (it matched).")
    privilege: PrivilegeReport | None = None
