"""systemd units, the journal and ``admin_transaction``: adapters over :attr:`remoteops.RemoteOps.systemd`.

Every unit name is remoteops' :data:`~remoteops.UnitName` (one closed grammar, stated in the published
schema): anything else is ``validation_error`` before the target is touched. ``privilege: auto`` (default)
runs as the login user and escalates through the operator's root providers only after systemd or the
journal denied it, and only on targets in ``root.targets``; ``user`` never escalates; ``root`` on a target
outside ``root.targets`` is ``policy_denied``. The result's ``privilege`` names every attempt (and lands in
the audit record's ``facts.privilege``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Input, Output, TargetName
from gateway.tools._registry import CHANGE, READ, ToolGroup
from remoteops import (
    UNIT_TYPES,
    JournalPage,
    PrivilegeMode,
    SecretSource,
    ServiceName,
    TransactionRequest,
    TransactionResult,
    UnitAction,
    UnitActionResult,
    UnitDependencies,
    UnitList,
    UnitName,
    UnitStatus,
    service_unit,
)

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs

_PRIVILEGE_HELP = (
    "auto: as the login user, escalating only after systemd denies it (targets in root.targets "
    "only); user: never escalate; root: escalate at once (root.targets only)."
)


def _escalation(ctx: ToolContext, target: str, privilege: PrivilegeMode) -> tuple[bool, SecretSource]:
    allowed = target in ctx.runtime.settings.root.targets
    if privilege == "root" and not allowed:
        raise ToolFailure(
            ErrorCode.POLICY_DENIED,
            f"target {target!r} is not in the root allow-list (root.targets); nothing was connected",
            details={"target": target, "reason": "not_root_allowed"},
        )
    return allowed, ctx.runtime.secrets.source(ctx.principal, ctx.elicitor, ctx.resume)


class StatusIn(Input):
    target: TargetName
    units: list[UnitName] = Field(min_length=1, max_length=64)


class ServiceStatusIn(Input):
    target: TargetName
    service: ServiceName


class StatusOut(Output):
    target: str
    units: list[UnitStatus]


class ListIn(Input):
    target: TargetName
    type: Literal[UNIT_TYPES] | None = Field(None, description="Only units of this type.")  # type: ignore[valid-type]
    state: Literal["active", "inactive", "failed", "activating", "deactivating", "reloading"] | None = None
    pattern: str | None = Field(
        None, max_length=255, pattern=r"^[A-Za-z0-9:_.@*\\-]+$", description="A unit name or glob (rog-*)."
    )
    all: bool = Field(False, description="Include inactive units systemd has loaded.")
    limit: int = Field(200, ge=1, le=1000)


class DepsIn(Input):
    target: TargetName
    unit: UnitName


class ActionIn(Input):
    target: TargetName
    unit: UnitName
    action: UnitAction
    privilege: PrivilegeMode = Field("auto", description=_PRIVILEGE_HELP)
    settle_s: float = Field(10, ge=0, le=300, description="How long to wait for the unit to settle.")


class ServiceActionIn(Input):
    target: TargetName
    service: ServiceName
    privilege: PrivilegeMode = Field("auto", description=_PRIVILEGE_HELP)
    settle_s: float = Field(10, ge=0, le=300)


class DaemonReloadIn(Input):
    target: TargetName
    unit: UnitName | None = Field(None, description="A unit whose state to report before and after.")
    privilege: PrivilegeMode = Field("auto", description=_PRIVILEGE_HELP)


class JournalIn(Input):
    target: TargetName
    unit: UnitName | None = None
    since: str | None = Field(
        None, max_length=64, description="journalctl time: '10 min ago', '@1700000000'."
    )
    until: str | None = Field(None, max_length=64)
    priority: Literal["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"] | None = None
    grep: str | None = Field(None, min_length=1, max_length=500, description="PCRE matched on MESSAGE.")
    lines: int = Field(100, ge=1, le=1000)
    cursor: str | None = Field(
        None, max_length=512, pattern=r"^[A-Za-z0-9=;_-]+$", description="Continue right after this entry."
    )
    privilege: PrivilegeMode = Field("auto", description=_PRIVILEGE_HELP)


class TransactionIn(TransactionRequest):
    """One reversible change (see docs/systemd.md#admin_transaction)."""


def _audit(ctx: ToolContext, result: UnitActionResult | JournalPage) -> None:
    ctx.audit_facts["privilege"] = result.privilege.model_dump(mode="json")


def _render_status(out: StatusOut) -> str:
    return "\n".join(
        f"{u.unit}: {u.load_state}, {u.active_state} ({u.sub_state})"
        + (f", pid {u.main_pid}" if u.main_pid else "")
        + (f", {u.exit_code} {u.exit_status}" if u.exit_code else "")
        for u in out.units
    )


def _render_action(out: UnitActionResult) -> str:
    def state(s: UnitStatus | None) -> str:
        return f"{s.active_state}/{s.sub_state} ({s.unit_file_state})" if s else "-"

    who = f"root via {out.privilege.provider}" if out.privilege.ran_as == "root" else "login user"
    return (
        f"{out.action} {out.unit or ''}: {out.job_result}; {state(out.before)} -> {state(out.after)} [{who}]"
    )


@_tools.tool(
    "systemd_unit_status",
    "systemd unit status",
    "Typed state of units from systemctl show: load/active/sub state, main PID, since timestamps, result, "
    "exit code and status, unit file state, fragment path.",
    render=_render_status,
)
async def systemd_unit_status(ctx: ToolContext, args: StatusIn) -> StatusOut:
    return StatusOut(
        target=args.target, units=await ctx.runtime.remote.systemd.status(args.target, args.units)
    )


@_tools.tool(
    "service_status",
    "Service status",
    "systemd_unit_status of one service (nginx = nginx.service).",
    render=_render_status,
)
async def service_status(ctx: ToolContext, args: ServiceStatusIn) -> StatusOut:
    unit = service_unit(args.service)
    return StatusOut(target=args.target, units=await ctx.runtime.remote.systemd.status(args.target, [unit]))


@_tools.tool(
    "systemd_unit_list",
    "List systemd units",
    "Units systemd has loaded (list-units --output=json; 'source' says plain where the target's systemctl "
    "lacks JSON), filtered by type, state and glob, at most limit.",
)
async def systemd_unit_list(ctx: ToolContext, args: ListIn) -> UnitList:
    return await ctx.runtime.remote.systemd.list(
        args.target, unit_type=args.type, state=args.state, pattern=args.pattern, all_units=args.all,
        limit=args.limit,
    )  # fmt: skip


@_tools.tool(
    "systemd_unit_dependencies",
    "systemd unit dependencies",
    "Requires, Wants, BindsTo, PartOf, Conflicts, After, Before, RequiredBy and WantedBy of a unit.",
)
async def systemd_unit_dependencies(ctx: ToolContext, args: DepsIn) -> UnitDependencies:
    return await ctx.runtime.remote.systemd.dependencies(args.target, args.unit)


@_tools.tool(
    "journal_read",
    "Read the journal",
    "journalctl -o json entries (by unit, since/until, priority, grep), at most lines; without cursor the "
    "latest, with cursor the entries right after it (no entry lost or repeated). Pass the result's cursor "
    "to continue.",
)
async def journal_read(ctx: ToolContext, args: JournalIn) -> JournalPage:
    escalate, secrets = _escalation(ctx, args.target, args.privilege)
    page = await ctx.runtime.remote.systemd.journal(
        args.target, unit=args.unit, since=args.since, until=args.until, priority=args.priority,
        grep=args.grep, lines=args.lines, cursor=args.cursor, privilege=args.privilege, escalate=escalate,
        secrets=secrets,
    )  # fmt: skip
    _audit(ctx, page)
    return page


async def _act(
    ctx: ToolContext, target: str, unit: str, action: UnitAction, privilege: PrivilegeMode, settle_s: float
) -> UnitActionResult:
    escalate, secrets = _escalation(ctx, target, privilege)
    result = await ctx.runtime.remote.systemd.action(
        target, unit, action, privilege=privilege, escalate=escalate, secrets=secrets, settle_s=settle_s
    )
    _audit(ctx, result)
    return result


@_tools.tool(
    "systemd_unit_action",
    "systemd unit action",
    "start, stop, restart, reload, try-restart, enable, disable, mask or unmask a unit: its state before and "
    "after (waiting, bounded, for it to settle) and the job result.",
    kind=CHANGE,
    render=_render_action,
)
async def systemd_unit_action(ctx: ToolContext, args: ActionIn) -> UnitActionResult:
    return await _act(ctx, args.target, args.unit, args.action, args.privilege, args.settle_s)


def _service_tool(action: Literal["start", "stop", "restart"]) -> None:
    async def handler(ctx: ToolContext, args: ServiceActionIn) -> UnitActionResult:
        return await _act(ctx, args.target, service_unit(args.service), action, args.privilege, args.settle_s)

    handler.__qualname__ = handler.__name__ = f"service_{action}"
    _tools.tool(
        f"service_{action}",
        f"Service {action}",
        f"systemd_unit_action {action} of one service (nginx = nginx.service).",
        kind=CHANGE,
        render=_render_action,
    )(handler)


_SERVICE_ACTIONS: tuple[Literal["start", "stop", "restart"], ...] = ("start", "stop", "restart")
for _action in _SERVICE_ACTIONS:
    _service_tool(_action)


@_tools.tool(
    "systemd_daemon_reload",
    "systemd daemon-reload",
    "systemctl daemon-reload (after a unit file change); with unit, its state before and after.",
    kind=CHANGE,
    render=_render_action,
)
async def systemd_daemon_reload(ctx: ToolContext, args: DaemonReloadIn) -> UnitActionResult:
    escalate, secrets = _escalation(ctx, args.target, args.privilege)
    result = await ctx.runtime.remote.systemd.daemon_reload(
        args.target, unit=args.unit, privilege=args.privilege, escalate=escalate, secrets=secrets
    )
    _audit(ctx, result)
    return result


def _render_tx(out: TransactionResult) -> str:
    steps = ", ".join(f"{s.name}:{s.status}" for s in out.steps)
    return f"{out.outcome}{' (conflict)' if out.conflict else ''}: {steps}"


@_tools.tool(
    "admin_transaction",
    "Reversible admin change",
    "One reversible change: a unit action, or an atomic file replacement optionally followed by a unit "
    "action; an optional precheck; 1-8 health gates (unit_active, tcp_port, command, http_status, run on "
    "the target) polled for settle_s; on a failed gate the file is restored only if it still holds what was "
    "written (else conflict, left in place), the unit put back, the rollback verified. Every step is in the "
    "result; a transport loss is 'ambiguous' with the last step known done, never retried.",
    kind=CHANGE,
    render=_render_tx,
)
async def admin_transaction(ctx: ToolContext, args: TransactionIn) -> TransactionResult:
    escalate, secrets = _escalation(ctx, args.target, args.privilege)
    result = await ctx.runtime.remote.systemd.transaction(args, escalate=escalate, secrets=secrets)
    ctx.audit_facts["transaction"] = {
        "outcome": result.outcome,
        "steps": [f"{s.name}:{s.status}" for s in result.steps],
        "last_done_step": result.last_done_step,
        # who ran each step that says so (the file as the login user or through a root provider; the unit)
        "privilege": {s.name: s.data["privilege"] for s in result.steps if "privilege" in s.data},
    }
    return result
