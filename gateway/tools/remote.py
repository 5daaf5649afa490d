"""Targets and ``remote_exec``: thin adapters over :class:`remoteops.RemoteOps`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway._context import ToolContext
from gateway.tools._base import Input, Output, TargetName, decode_stdin
from gateway.tools._registry import CHANGE, READ, ToolGroup
from remoteops import (
    Capabilities,
    CommandRequest,
    DiagnoseReport,
    ExecResult,
    InvalidRequest,
    Selector,
    TargetInfo,
    resolve_selector,
)

__all__ = ["SPECS", "ExecIn", "render_exec"]

_tools = ToolGroup(READ)
SPECS = _tools.specs


class TargetIn(Input):
    target: TargetName


class CapabilitiesIn(TargetIn):
    refresh: bool = Field(False, description="Probe again even when a cached answer (120 s) exists.")


class TargetListIn(Input):
    group: str | None = Field(None, min_length=1, max_length=128, description="Only this group's targets.")
    labels: dict[str, str] | None = Field(None, description="Only targets carrying these labels.")
    targets: list[str] | None = Field(None, min_length=1, max_length=10_000, description="Only these names.")


class TargetListOut(Output):
    targets: list[TargetInfo]


class ExecIn(CommandRequest):
    stdin: str | None = Field(None, description="Data for the command's stdin.")
    stdin_encoding: Literal["text", "base64"] = "text"
    timeout_s: float | None = Field(
        None, gt=0, description="Time limit enforced locally and on the target (default 60 s)."
    )

    def stdin_bytes(self) -> bytes | None:
        return decode_stdin(self.stdin, self.stdin_encoding)


def render_exec(out: ExecResult) -> str:
    status = f"exit {out.exit_code}" if out.exit_code is not None else f"signal {out.signal}"
    if out.timed_out:
        status += f" (timed out; remote process {'stopped' if out.remote_killed else 'may still run'})"
    parts = [f"{status} in {out.duration_ms:.0f} ms on {out.target}"]
    for name, text, cut in (
        ("stdout", out.stdout, out.stdout_truncated),
        ("stderr", out.stderr, out.stderr_truncated),
    ):
        if text:
            shown = text if len(text) <= 4000 else text[:2000] + "\n…\n" + text[-2000:]
            parts.append(f"[{name}{' truncated' if cut else ''}]\n{shown}")
    return "\n".join(parts)


def _render_caps(out: Capabilities) -> str:
    present = sorted(k for k, v in out.tools.items() if v)
    return (
        f"{out.target}: {out.os_pretty or out.os_id or '?'} {out.kernel or ''} {out.arch or ''}; "
        f"user {out.user} (uid {out.uid}); tools: {', '.join(present)}; "
        f"absent: {', '.join(out.absent) or 'none'}; carrier: {out.carrier or 'not decided yet'}"
        + (f" ({out.carrier_reason})" if out.carrier_reason else "")
    )


def _render_list(out: TargetListOut) -> str:
    lines = []
    for t in out.targets:
        who = f"{t.identity.user}@{t.identity.hostname}:{t.identity.port}" if t.identity else t.identity_error
        lines.append(f"{t.name}: {who}; master {'up' if t.multiplex.master_alive else 'down'}")
    return "\n".join(lines) or "no targets configured"


@_tools.tool(
    "target_list",
    "List targets",
    "The configured targets (the only ones allowed), their labels, resolved SSH identity (user, host, "
    "port, jump chain, identity files) and multiplex state; optionally only those a selector (group, "
    "labels, targets) names.",
    render=_render_list,
    open_world=False,
)
async def target_list(ctx: ToolContext, args: TargetListIn) -> TargetListOut:
    """Only the targets the caller's policy reaches (the others are not named at all), filtered by the
    fleet tools' selector when one is given."""
    infos = await ctx.runtime.remote.list_targets()
    visible = set(ctx.visible_targets([info.name for info in infos]))
    if args.group is not None or args.labels or args.targets is not None:
        settings = ctx.runtime.settings
        selector = Selector(group=args.group, labels=args.labels, targets=args.targets)
        try:
            chosen = set(resolve_selector(selector, settings.targets, settings.groups).selected)
        except InvalidRequest as exc:
            if exc.reason != "empty":
                raise
            chosen = set()
        visible &= chosen
    return TargetListOut(targets=[info for info in infos if info.name in visible])


@_tools.tool(
    "target_capabilities",
    "Target capabilities",
    "Probe a target in one round trip: OS, kernel, arch, user and uid, and which of python3, rsync, tmux, "
    "sudo (and sudo -n), su, docker, systemctl, journalctl, ss, sha256sum, timeout and nvidia-smi exist. "
    "Cached 120 s.",
    render=_render_caps,
)
async def target_capabilities(ctx: ToolContext, args: CapabilitiesIn) -> Capabilities:
    return await ctx.runtime.remote.capabilities(args.target, refresh=args.refresh)


@_tools.tool(
    "target_diagnose",
    "Diagnose target",
    "Transport and multiplex state, identity, capabilities, disk pressure and failed systemd units of a "
    "target; each section degrades on its own.",
)
async def target_diagnose(ctx: ToolContext, args: TargetIn) -> DiagnoseReport:
    return await ctx.runtime.remote.diagnose(args.target)


@_tools.tool(
    "remote_exec",
    "Run a command on a target",
    "Run argv (or a sh command string) on a target over OpenSSH; returns exit_code, signal, stdout and "
    "stderr separately. A non-zero exit is a normal result. Payloads go on stdin. transport_lost means the "
    "command may or may not have run: it is never re-run automatically.",
    kind=CHANGE,
    render=render_exec,
)
async def remote_exec(ctx: ToolContext, args: ExecIn) -> ExecResult:
    # a timeout_s above transport.exec_timeout_max_s is remoteops' InvalidRequest (validation_error)
    return await ctx.runtime.remote.run(
        args.target,
        args.argv,
        args.shell,
        stdin=args.stdin_bytes(),
        cwd=args.cwd,
        env=args.env,
        timeout_s=args.timeout_s,
    )
