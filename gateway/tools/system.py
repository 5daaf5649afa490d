"""System inspection [inspect] and ``process_signal`` [execute]: thin adapters over
:attr:`remoteops.RemoteOps.system`, each one remote program (one round trip) on either carrier.

``process_signal``'s ``privilege``: ``user`` never escalates; ``auto`` (default) signals as the login user
and escalates through the root providers only after an observed EPERM, and only on a target of
``root.targets`` (elsewhere ``auto`` is ``user``); ``root`` on a target outside ``root.targets`` is
``policy_denied`` before anything is connected.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Input, TargetName, audit_privilege, privilege_failure_audited
from gateway.tools._registry import CHANGE, READ, ToolGroup
from remoteops import (
    DiskUsageReport,
    GpuInfo,
    PortList,
    ProcessList,
    ProcessSort,
    SignalName,
    SignalResult,
    SystemInfo,
)

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs

PID_MAX = 4_194_304
"""Linux's PID_MAX_LIMIT (2^22): no process id is larger."""


class TargetIn(Input):
    target: TargetName


class ProcessListIn(Input):
    target: TargetName
    limit: int | None = Field(
        None, ge=1, le=10_000, description="At most this many (default 100; the gateway's ceiling applies)."
    )
    sort: ProcessSort = Field("cpu", description="cpu, memory (RSS), start (newest first) or pid.")
    users: list[str] | None = Field(None, max_length=256, description="User names or uids.")
    names: list[str] | None = Field(None, max_length=256, description="Command names (/proc/PID/comm).")
    pids: list[Annotated[int, Field(ge=1, le=PID_MAX)]] | None = Field(None, max_length=256)


class PortListIn(Input):
    target: TargetName
    source: Literal["auto", "ss", "proc"] = Field(
        "auto", description="auto: ss where the target has it, else /proc."
    )


class DiskUsageIn(Input):
    target: TargetName
    path: str | None = Field(
        None,
        min_length=1,
        description="Also break down this path by its largest direct children (one filesystem).",
    )
    top_n: int = Field(20, ge=1, le=1000)
    limit_s: float = Field(10.0, gt=0, le=300, description="Time bound of the breakdown.")
    max_entries: int = Field(
        200_000, ge=1, le=5_000_000, description="Entry bound of the breakdown (files, directories)."
    )


class ProcessSignalIn(Input):
    target: TargetName
    pid: int = Field(ge=1, le=PID_MAX, description="The process (Linux allows at most 2^22).")
    signal: SignalName = "TERM"
    start_time: float | None = Field(
        None, description="The start_time process_list gave: the process must still have it."
    )
    name: str | None = Field(None, min_length=1, description="The command name it must still have.")
    privilege: Literal["auto", "user", "root"] = "auto"


@_tools.tool(
    "system_info",
    "Describe a target's system",
    "Hostname, OS (os-release), kernel, architecture, uptime, load averages, CPU count, memory and swap "
    "(bytes), boot id.",
)
async def system_info(ctx: ToolContext, args: TargetIn) -> SystemInfo:
    return await ctx.runtime.remote.system.info(args.target)


@_tools.tool(
    "process_list",
    "List a target's processes",
    "Processes (pid, ppid, user, state, %cpu, RSS bytes, exact start time, argv capped), filtered by user, "
    "command name or PID, sorted by cpu, memory, start or pid, bounded by limit.",
)
async def process_list(ctx: ToolContext, args: ProcessListIn) -> ProcessList:
    ceiling = ctx.runtime.settings.system.process_list_max
    limit = min(100, ceiling) if args.limit is None else args.limit
    if limit > ceiling:
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR,
            f"limit must be at most {ceiling} (system.process_list_max)",
            details={"field": "limit", "ceiling": ceiling},
        )
    return await ctx.runtime.remote.system.processes(
        args.target, limit=limit, sort=args.sort, users=args.users, names=args.names, pids=args.pids
    )


@_tools.tool(
    "port_list",
    "List a target's listening sockets",
    "Listening TCP and UDP sockets: address, port and owning process where visible; source says whether "
    "ss or /proc was read.",
)
async def port_list(ctx: ToolContext, args: PortListIn) -> PortList:
    return await ctx.runtime.remote.system.ports(args.target, source=args.source)


@_tools.tool(
    "disk_usage",
    "Show a target's disk usage",
    "Filesystems (df -P -B1 -T: size, used, available, use %, mount, type) and, for path, its largest "
    "direct children on one filesystem (find -xdev), stopped after limit_s or max_entries (complete=false, "
    "cut_by says which).",
)
async def disk_usage(ctx: ToolContext, args: DiskUsageIn) -> DiskUsageReport:
    return await ctx.runtime.remote.system.disk(
        args.target, path=args.path, top_n=args.top_n, limit_s=args.limit_s, max_entries=args.max_entries
    )


@_tools.tool(
    "gpu_info",
    "Show a target's GPUs",
    "Per NVIDIA GPU (nvidia-smi): index, name, memory total/used, utilization, temperature, driver; "
    "missing_remote_capability where nvidia-smi is absent.",
)
async def gpu_info(ctx: ToolContext, args: TargetIn) -> GpuInfo:
    return await ctx.runtime.remote.system.gpus(args.target)


@_tools.tool(
    "process_signal",
    "Signal a process whose identity still matches",
    "Send TERM/INT/HUP/KILL/USR1/USR2/STOP/CONT to pid only if it still has the start_time (from "
    "process_list) and/or name given; checked and sent in one remote step, a recycled PID is conflict. "
    "privilege auto escalates only after EPERM and only on root-allowed targets.",
    kind=CHANGE,
)
async def process_signal(ctx: ToolContext, args: ProcessSignalIn) -> SignalResult:
    root_allowed = args.target in ctx.runtime.settings.root.targets
    if args.privilege == "root" and not root_allowed:
        raise ToolFailure(
            ErrorCode.POLICY_DENIED,
            f"target {args.target!r} is not in the root allow-list (root.targets); nothing was connected",
            details={"target": args.target, "reason": "not_root_allowed"},
        )
    mode = args.privilege if root_allowed else "user"
    source = ctx.runtime.secrets.source(ctx.principal, ctx.elicitor, ctx.resume)
    with privilege_failure_audited(ctx):
        result = await ctx.runtime.remote.system.signal(
            args.target,
            args.pid,
            args.signal,
            start_time=args.start_time,
            name=args.name,
            privilege=mode,
            secrets=source,
        )
    audit_privilege(ctx, result.privilege)
    return result
