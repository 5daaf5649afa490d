"""Typed records returned by the public API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from remoteops._settings import CarrierMode, MultiplexMode
from remoteops.privilege.models import PrivilegeReport

__all__ = [
    "Capabilities",
    "CarrierState",
    "DiagnoseReport",
    "DiskUsage",
    "ExecResult",
    "MultiplexState",
    "SectionError",
    "TargetIdentity",
    "TargetInfo",
    "TransportStats",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ExecResult(BaseModel):
    """The outcome of one remote command. A non-zero ``exit_code`` (255 included) is a normal result.

    ``signal`` is inferred from the target shell's ``128+N`` convention (``exit_code`` is always kept as
    the shell reported it). ``timed_out``: the remote time limit stopped the command; ``remote_killed``: the
    remote process was stopped by remoteops (time limit or cancellation) and confirmed gone.
    """

    model_config = _FROZEN

    target: str
    exit_code: int | None
    signal: str | None = None
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_dropped_bytes: int = 0
    stderr_dropped_bytes: int = 0
    duration_ms: float
    timed_out: bool = False
    remote_killed: bool = False
    multiplexed: bool = False  # went over a ControlMaster
    privilege: PrivilegeReport | None = None  # set when privilege was root or auto: what was tried, what ran


class TargetIdentity(BaseModel):
    """What ``ssh -G`` resolved a target to. ``identity_hash`` is stable while these fields are."""

    model_config = _FROZEN

    user: str
    hostname: str
    port: int
    proxyjump: tuple[str, ...] = ()
    proxycommand: str | None = None
    identity_files: tuple[str, ...] = ()
    host_key_alias: str | None = None
    identity_hash: str


class Capabilities(BaseModel):
    model_config = _FROZEN

    target: str
    identity_hash: str
    os_id: str | None = None
    os_version: str | None = None
    os_pretty: str | None = None
    kernel: str | None = None
    arch: str | None = None
    user: str | None = None
    uid: int | None = None
    tools: dict[str, bool] = Field(default_factory=dict)  # every probed tool, present or absent
    sudo_nopasswd: bool = False  # ``sudo -n true`` succeeded
    sudo_said: str | None = None  # what ``sudo -n true`` printed when it failed (requiretty, password, ...)
    rsync_version: str | None = None  # the target's ``rsync --version`` (``3.2.7``), when rsync is there
    probed_at: float  # epoch seconds
    carrier: Literal["agent", "ssh"] | None = None  # how commands reach the target now (see CarrierState)
    # why the target's commands go over ssh: CarrierState.reason, the same text gateway_health reports (the
    # agent's fallback reason: no usable python3, refused, ...; or ``carrier = ssh``); None: no fallback
    carrier_reason: str | None = None
    agent_build: str | None = None  # the build id of the target's live agent (see CarrierState)

    @property
    def absent(self) -> list[str]:
        return sorted(name for name, present in self.tools.items() if not present)


class MultiplexState(BaseModel):
    model_config = _FROZEN

    mode: MultiplexMode
    master_alive: bool = False
    master_pid: int | None = None
    control_path: str | None = None
    channels_in_use: int = 0
    idle_s: float | None = None
    adopted: bool = False  # found already running (e.g. left by an earlier process) and reused


class CarrierState(BaseModel):
    """How commands reach one target: ``agent`` (a persistent agent channel) or ``ssh`` (one ssh per call);
    None until the first command decided it. ``reason`` says why a target in ``auto`` mode uses ssh."""

    model_config = _FROZEN

    mode: CarrierMode
    carrier: Literal["agent", "ssh"] | None = None
    reason: str | None = None
    agent_alive: bool = False
    agent_pid: int | None = None  # on the target
    agent_python: str | None = None
    agent_build: str | None = None  # the live agent's build id (SHA-256 of its program, from its HELLO)
    channels_started: int = 0
    requests_in_flight: int = 0
    agents_stuck: int = 0  # agents found stuck by the liveness probe (each killed and replaced)
    root_carrier: Literal["agent", "ssh"] | None = None  # how the last root command was carried
    root_agent_pid: int | None = None  # the live root agent on the target (``[root] agent = true``)
    root_agent_build: str | None = None
    root_channels_started: int = 0


class TargetInfo(BaseModel):
    model_config = _FROZEN

    name: str
    host: str
    labels: dict[str, str] = Field(default_factory=dict)
    identity: TargetIdentity | None = None
    identity_error: str | None = None
    multiplex: MultiplexState


class TransportStats(BaseModel):
    model_config = _FROZEN

    masters_created: int = 0
    masters_reused: int = 0
    masters_adopted: int = 0
    stale_recovered: int = 0
    fallbacks: int = 0
    evictions: int = 0
    live_masters: int = 0
    runs: int = 0
    failures: dict[str, int] = Field(default_factory=dict)  # exception class name -> count
    capability_probes: int = 0
    capability_cache_hits: int = 0
    control_dir: str
    control_dir_fallback: bool = False
    control_dir_note: str | None = None
    carriers: dict[str, CarrierState] = Field(default_factory=dict)  # target name -> carrier state


class SectionError(BaseModel):
    model_config = _FROZEN

    error: str  # exception class name
    detail: str


class DiskUsage(BaseModel):
    model_config = _FROZEN

    filesystem: str
    mount: str
    size_kb: int
    used_kb: int
    avail_kb: int
    use_percent: int


class DiagnoseReport(BaseModel):
    """Each section degrades on its own: a failed section is None and its error is in ``errors``."""

    model_config = _FROZEN

    target: str
    multiplex: MultiplexState
    identity: TargetIdentity | None = None
    capabilities: Capabilities | None = None
    disks: list[DiskUsage] | None = None
    failed_units: list[str] | None = None
    errors: dict[str, SectionError] = Field(default_factory=dict)
