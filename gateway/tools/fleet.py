"""``exec_many`` [execute], ``root_exec_many`` [root], ``upload_many`` [execute]: thin adapters over the
fleet engine (:class:`remoteops.FleetRunner`) whose per-target jobs are the single-target paths
(``RemoteOps.run`` as ``remote_exec`` / ``remote_root_exec`` call it, ``Transfers.upload`` as
``remote_upload`` does), so the master pool, the agent channels, the privilege providers and the secret
broker are the same.

The selector is resolved before anything connects, against the allow-list and the caller's grants:
targets outside them are ``policy_denied`` records in the result (never silently dropped). One progress
notification per finished target. Failures of single targets are records carrying the structured error of
the one vocabulary (``gateway._errmap``); only a request that cannot run at all (bad selector, bad
arguments) fails the whole call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from gateway._catalog import Toolset
from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._registry import CHANGE, ToolGroup, no_local_roots
from gateway.tools.fleet_models import (
    ExecManyIn,
    ExecManyOut,
    UploadManyIn,
    UploadManyOut,
    UploadRecord,
)
from gateway.tools.fleet_run import (
    exec_out,
    record_fields,
    render_exec,
    render_summary,
    run_fleet,
    selected_targets,
    summarize,
)
from remoteops import (
    ExecResult,
    PolicyDenied,
    PrivilegeMode,
    Resolution,
    TransferHooks,
    TransferOptions,
    TransferResult,
    check_time_limit,
    exec_succeeded,
)

__all__ = ["SPECS"]

_AUDIT_MAX = 50
"""At most this many targets' privilege providers in an audit record's facts."""


_tools = ToolGroup(CHANGE)
_uploads = ToolGroup(CHANGE, unavailable=no_local_roots)


def _exec_limits(ctx: ToolContext, timeout_s: float | None) -> tuple[float, float]:
    """The per-target remote time limit and the engine's ceiling of a whole target (connect and all)."""
    transport = ctx.runtime.settings.transport
    limit = transport.exec_timeout_default_s if timeout_s is None else timeout_s
    check_time_limit(limit, transport.exec_timeout_max_s)
    return limit, limit + transport.connect_timeout_s + transport.kill_after_s + 10.0


async def _exec_many(
    ctx: ToolContext,
    tool: str,
    args: ExecManyIn,
    *,
    privilege: PrivilegeMode,
    denied: Callable[[Resolution], tuple[Resolution, list[tuple[str, PolicyDenied]]]] | None = None,
) -> ExecManyOut:
    resolution = selected_targets(ctx, args)
    more: list[tuple[str, PolicyDenied]] = []
    if denied is not None:
        resolution, more = denied(resolution)
    limit, ceiling = _exec_limits(ctx, args.timeout_s)
    cap = args.output_cap_bytes or ctx.runtime.settings.fleet.output_cap_bytes
    cap = min(cap, ctx.runtime.settings.transport.output_cap_bytes)
    stdin = args.stdin_bytes()
    remote = ctx.runtime.remote
    secrets = (
        ctx.runtime.secrets.source(ctx.principal, ctx.elicitor, ctx.resume) if privilege == "root" else None
    )

    async def job(target: str) -> ExecResult:
        return await remote.run(
            target,
            args.argv,
            args.shell,
            stdin=stdin,
            cwd=args.cwd,
            env=args.env,
            timeout_s=limit,
            privilege=privilege,
            secrets=secrets,
        )

    run = await run_fleet(ctx, tool, args, resolution, more, job, exec_succeeded, ceiling)
    if privilege == "root":
        ctx.audit_facts["privilege"] = {
            r.target: r.value.privilege.provider
            for r in run.records[:_AUDIT_MAX]
            if r.value is not None and r.value.privilege is not None
        }
    return exec_out(ctx, run, cap)


# -------------------------------------------------------------------------------------------------- tools


@_tools.tool(
    "exec_many",
    "Run a command on many targets",
    "Run one argv (or sh command string) on every target a selector names (group, labels, explicit "
    "targets), resolved against the allow-list and the caller's grants before anything connects: forks "
    "in flight at once, serial batches, a canary first, a failure budget (max_failures), a time limit "
    "per target and overall. Returns per-target records and a summary whose identical outputs form one "
    "group; targets not started are skipped with the reason; refused ones are policy_denied records. "
    "Progress per finished target.",
    render=render_exec,
)
async def exec_many(ctx: ToolContext, args: ExecManyIn) -> ExecManyOut:
    return await _exec_many(ctx, "exec_many", args, privilege="user")


def _root_allowed(
    ctx: ToolContext,
) -> Callable[[Resolution], tuple[Resolution, list[tuple[str, PolicyDenied]]]]:
    allowed = set(ctx.runtime.settings.root.targets)

    def split(resolution: Resolution) -> tuple[Resolution, list[tuple[str, PolicyDenied]]]:
        keep = tuple(n for n in resolution.selected if n in allowed)
        refused = [
            (
                name,
                PolicyDenied(
                    f"target {name!r} is not in the root allow-list (root.targets); nothing was connected",
                    target=name,
                    reason="not_root_allowed",
                ),
            )
            for name in resolution.selected
            if name not in allowed
        ]
        return Resolution(selected=keep, denied=resolution.denied), refused

    return split


@_tools.tool(
    "root_exec_many",
    "Run a command as root on many targets",
    "exec_many as root: the same selector and batching; targets outside the root allow-list are "
    "policy_denied records. Each target goes through the operator's root providers as remote_root_exec; "
    "a password is never an argument (a human enters it on the one-time page).",
    toolset=Toolset.ROOT,
    render=render_exec,
)
async def root_exec_many(ctx: ToolContext, args: ExecManyIn) -> ExecManyOut:
    return await _exec_many(ctx, "root_exec_many", args, privilege="root", denied=_root_allowed(ctx))


def _local_file(ctx: ToolContext, local_path: str) -> tuple[str, int, str]:
    """The local file's resolved path, size and SHA-256 (checked once, before any target)."""
    path = ctx.runtime.transfers.roots.resolve(local_path)
    if not path.is_file():
        raise ToolFailure(
            ErrorCode.NOT_FOUND if not path.exists() else ErrorCode.VALIDATION_ERROR,
            f"the local path {str(path)!r} is not a regular file (upload_many sends one file)",
            details={"local_path": str(path)},
        )
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return str(path), path.stat().st_size, digest.hexdigest()


def _render_upload(out: UploadManyOut) -> str:
    lines = [f"{render_summary(out.summary)}; {out.size} bytes, sha256 {out.sha256[:16]}…"]
    failed = [r for r in out.records if r.error is not None][:10]
    lines.extend(
        f"{r.target}: {r.outcome} {r.error.code}: {r.error.message[:200]}" for r in failed if r.error
    )
    return "\n".join(lines)


@_uploads.tool(
    "upload_many",
    "Upload a file to many targets",
    "Copy one file from the gateway host (under a configured local root) to the same path on every "
    "target a selector names, with the batching of exec_many (forks, serial, canary, max_failures); each "
    "copy is rsync (or scp) over the target's master and SHA-256 verified on the target. Per-target "
    "records (a full disk or a mismatch is that target's failure) and a summary.",
    render=_render_upload,
)
async def upload_many(ctx: ToolContext, args: UploadManyIn) -> UploadManyOut:
    resolution = selected_targets(ctx, args)
    local, size, digest = _local_file(ctx, args.local_path)
    settings = ctx.runtime.settings.transfers
    limit = check_time_limit(
        settings.time_limit_default_s if args.timeout_s is None else args.timeout_s, settings.time_limit_max_s
    )
    options = TransferOptions(overwrite=args.overwrite, create_parents=args.create_parents, verify="sha256")
    transfers = ctx.runtime.transfers

    async def job(target: str) -> TransferResult:
        return await transfers.upload(target, local, args.remote_path, options, TransferHooks())

    run = await run_fleet(ctx, "upload_many", args, resolution, [], job, lambda r: r.sha256 == digest, limit)
    records = []
    for record in run.records:
        value = record.value
        records.append(
            UploadRecord(
                **record_fields(ctx, record),
                bytes_transferred=value.bytes_transferred if value is not None else None,
                sha256=value.sha256 if value is not None else None,
                method=value.method if value is not None else None,
            )
        )
    totals = summarize(run, [r.outcome for r in records], [r.error for r in records])
    ctx.audit_facts.update(local_path=local, remote_path=args.remote_path, sha256=digest, size=size)
    return UploadManyOut(
        summary=totals,
        local_path=local,
        remote_path=args.remote_path,
        sha256=digest,
        size=size,
        records=records,
    )


SPECS = [*_tools.specs, *_uploads.specs]
