"""What the fleet tools share: the selector resolved for the caller, one fleet run with progress and audit
facts, and the records turned into the tools' results (errors in the one vocabulary, outputs grouped)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from gateway._context import ToolContext
from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools.fleet_models import (
    BatchIn,
    ExecManyOut,
    ExecRecord,
    FleetSummary,
    OutputGroup,
    SelectorIn,
    TargetError,
    TargetOutcome,
)
from remoteops import (
    CommandTimeout,
    ExecResult,
    FleetRun,
    FleetRunner,
    PolicyDenied,
    Resolution,
    TargetRecord,
    group_identical,
    resolve_selector,
)

__all__ = [
    "exec_out",
    "outcome_of",
    "record_fields",
    "render_exec",
    "render_summary",
    "run_fleet",
    "selected_targets",
    "summarize",
    "target_error",
]

_log = structlog.get_logger("gateway.fleet")
T = TypeVar("T")
_AUDIT_TARGETS = 50
"""At most this many target names in an audit record's facts."""
_RESULT_BUDGET = 512 * 1024
"""Bytes of output (all groups' stdout and stderr together) one exec_many result aims to stay under."""
_MIN_SHARE = 256

# ------------------------------------------------------------------------------------------------ helpers


def selected_targets(ctx: ToolContext, args: SelectorIn) -> Resolution:
    """The selector resolved against the allow-list, the caller's grants and ``fleet.max_targets``."""
    settings = ctx.runtime.settings
    return resolve_selector(
        args,
        settings.targets,
        settings.groups,
        lambda name: ctx.policy.allows_target(ctx.identity, name),
        max_targets=settings.fleet.max_targets,
    )


def target_error(ctx: ToolContext, exc: Exception | None) -> TargetError | None:
    if exc is None:
        return None
    failure = translate(exc) or ToolFailure(
        ErrorCode.INTERNAL_ERROR, f"unexpected error on this target: {type(exc).__name__}"
    )
    payload = ctx.runtime.redactor.any(failure.as_dict())
    return TargetError.model_validate(payload)


def outcome_of(record: TargetRecord[Any]) -> TargetOutcome:
    if record.outcome == "succeeded":
        return "ok"
    if record.outcome == "failed":
        value = record.value
        return "timeout" if isinstance(value, ExecResult) and value.timed_out else "nonzero_exit"
    if record.outcome == "error":
        return "timeout" if isinstance(record.error, CommandTimeout) else "error"
    if record.outcome == "denied":
        return "policy_denied"
    return record.outcome


def _clip(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text, False
    head, tail = data[: cap // 2], data[len(data) - (cap - cap // 2) :]
    return head.decode(errors="ignore") + "\n…\n" + tail.decode(errors="ignore"), True


def summarize(
    run: FleetRun[Any], outcomes: list[TargetOutcome], errors: list[TargetError | None]
) -> FleetSummary:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    by_code: dict[str, int] = {}
    for error in errors:
        if error is not None:
            by_code[error.code] = by_code.get(error.code, 0) + 1
    return FleetSummary(
        total=len(run.records),
        counts=counts,
        errors=by_code,
        stopped=run.stopped,
        batches=run.batches,
        max_in_flight=run.max_in_flight,
        wall_ms=round(run.wall_s * 1000, 3),
    )


def _progress(ctx: ToolContext, tool: str) -> Callable[[TargetRecord[Any], int, int], Awaitable[None]]:
    broken: list[str] = []

    async def on_done(record: TargetRecord[Any], done: int, total: int) -> None:
        if broken:
            return
        try:
            await ctx.report_progress(float(done), float(total), f"{record.target}: {outcome_of(record)}")
        except Exception as exc:  # a client that stopped listening must not stop the run
            broken.append(type(exc).__name__)
            _log.debug("progress_not_delivered", tool=tool, request_id=ctx.request_id, error=broken[0])

    return on_done


async def run_fleet(
    ctx: ToolContext,
    tool: str,
    args: BatchIn,
    resolution: Resolution,
    denied: list[tuple[str, PolicyDenied]],
    job: Callable[[str], Awaitable[T]],
    succeeded: Callable[[T], bool],
    target_ceiling_s: float,
) -> FleetRun[T]:
    plan = args.plan(ctx)
    runner = FleetRunner(
        resolution.selected,
        plan,
        job,
        succeeded=succeeded,
        denied=[*resolution.denied, *denied],
        on_done=_progress(ctx, tool),
        target_ceiling_s=target_ceiling_s,
        overall_timeout_s=args.overall_timeout_s,
    )
    run = await runner.run()
    ctx.audit_facts["fleet"] = {
        "selected": len(resolution.selected),
        "targets": list(resolution.selected[:_AUDIT_TARGETS]),
        "denied": [name for name, _ in [*resolution.denied, *denied]][:_AUDIT_TARGETS],
        "counts": run.counts(),
        "stopped": run.stopped,
        "plan": plan.model_dump(mode="json"),
    }
    return run


def exec_out(ctx: ToolContext, run: FleetRun[ExecResult], cap: int) -> ExecManyOut:
    ran: list[tuple[str, tuple[Any, ...]]] = []
    for record in run.records:
        value = record.value
        if value is not None:
            stdout, out_cut = _clip(value.stdout, cap)
            stderr, err_cut = _clip(value.stderr, cap)
            cut = (out_cut or value.stdout_truncated, err_cut or value.stderr_truncated)
            ran.append(
                (record.target, (value.exit_code, value.signal, value.timed_out, stdout, stderr, *cut))
            )
    grouped = group_identical(ran)
    index = {target: i for i, (_, targets) in enumerate(grouped) for target in targets}
    # many different outputs share one budget, so that a whole answer stays well under the 1 MiB event
    # limit of common MCP clients: each group's streams are clipped further when they would not fit
    total = sum(len(key[3].encode()) + len(key[4].encode()) for key, _ in grouped)
    share = cap if total <= _RESULT_BUDGET else max(_MIN_SHARE, _RESULT_BUDGET // (2 * len(grouped)))
    groups = []
    for key, targets in grouped:
        stdout, out_cut = _clip(key[3], share)
        stderr, err_cut = _clip(key[4], share)
        groups.append(
            OutputGroup(
                count=len(targets),
                targets=targets,
                exit_code=key[0],
                signal=key[1],
                timed_out=key[2],
                stdout=stdout,
                stderr=stderr,
                stdout_truncated=key[5] or out_cut,
                stderr_truncated=key[6] or err_cut,
            )
        )
    records = []
    for record in run.records:
        value = record.value
        records.append(
            ExecRecord(
                **record_fields(ctx, record),
                exit_code=value.exit_code if value is not None else None,
                output_group=index.get(record.target),
            )
        )
    totals = summarize(run, [r.outcome for r in records], [r.error for r in records])
    return ExecManyOut(summary=totals, groups=groups, records=records)


def record_fields(ctx: ToolContext, record: TargetRecord[Any]) -> dict[str, Any]:
    """What every fleet tool's per-target record says: target, outcome, batch, duration, error, reason."""
    duration = record.duration_s
    return {
        "target": record.target,
        "outcome": outcome_of(record),
        "batch": record.batch,
        "duration_ms": round(duration * 1000, 3) if duration is not None else None,
        "error": target_error(ctx, record.error),
        "reason": record.reason,
    }


def render_summary(summary: FleetSummary) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(summary.counts.items()))
    text = f"{summary.total} targets: {counts} in {summary.wall_ms / 1000:.2f} s"
    if summary.errors:
        text += "; errors: " + ", ".join(f"{n} {code}" for code, n in sorted(summary.errors.items()))
    if summary.stopped:
        text += f"; stopped: {summary.stopped}"
    return text


def _shown_targets(targets: list[str]) -> str:
    return ", ".join(targets[:5]) + (f", … ({len(targets) - 5} more)" if len(targets) > 5 else "")


def render_exec(out: ExecManyOut) -> str:
    lines = [render_summary(out.summary)]
    for number, group in enumerate(out.groups[:10]):
        status = f"exit {group.exit_code}" if group.exit_code is not None else f"signal {group.signal}"
        lines.append(f"[group {number}: {group.count} target(s), {status}: {_shown_targets(group.targets)}]")
        for name, text in (("stdout", group.stdout), ("stderr", group.stderr)):
            if text:
                shown = text if len(text) <= 1000 else text[:500] + "\n…\n" + text[-500:]
                lines.append(f"{name}: {shown.rstrip()}")
    if len(out.groups) > 10:
        lines.append(f"[{len(out.groups) - 10} more output groups in structuredContent]")
    failed = [r for r in out.records if r.error is not None][:10]
    lines.extend(
        f"{r.target}: {r.outcome} {r.error.code}: {r.error.message[:200]}" for r in failed if r.error
    )
    return "\n".join(lines)
