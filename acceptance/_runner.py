"""Run the registered phases in order against one environment; build the report; verify run-wide cleanup."""

from __future__ import annotations

import platform
import subprocess
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import anyio

from acceptance._env import Env, open_env
from acceptance._mcp import GatewayClient
from acceptance._registry import REGISTRY, Phase, PhaseContext, PhaseFailed, PhaseSkipped, pid_gone
from acceptance._report import CleanupCheck, PhaseResult, Report, Status
from acceptance.harness.procs import processes_mentioning

__all__ = ["QUICK_CEILING_S", "run_suite", "selected_phases"]

QUICK_CEILING_S = 300.0
"""A phase's ceiling in quick mode (a hang guard, not a timing check): the longest phase, systemd, takes
~55 s here and ~70 s beside a CPU hog; the others 1-30 s."""
FULL_CEILING_S = 1200.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def selected_phases(only: Sequence[str] = ()) -> list[Phase]:
    import acceptance.phases  # noqa: F401 - registers every phase

    unknown = set(only) - {p.name for p in REGISTRY}
    if unknown:
        raise SystemExit(f"unknown phase(s): {', '.join(sorted(unknown))}")
    return [p for p in REGISTRY if not only or p.name in only]


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("remoteops-gateway", "mcp", "libtmux-mcp"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "not installed"
    try:
        ssh = subprocess.run(["ssh", "-V"], capture_output=True, text=True, timeout=10, check=False)
        found["openssh"] = ssh.stderr.strip()
    except OSError:
        found["openssh"] = "not installed"
    return found


def _missing(phase: Phase, env: Env) -> list[str]:
    reasons = {"sshd": env.sshd_reason, "upstream": env.upstream_reason}
    return [f"{need}: {reasons[need]}" for need in phase.needs if reasons.get(need)]


def _trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-6000:]


async def _run_one(phase: Phase, env: Env, quick: bool) -> PhaseResult:
    result = PhaseResult(phase.name, phase.title, Status.PASSED)
    if phase.run is None:
        result.status, result.reason = Status.NOT_BUILT, phase.reason
        return result
    missing = _missing(phase, env)
    if missing:
        result.status, result.reason = Status.SKIPPED, "; ".join(missing)
        return result
    ctx = PhaseContext(env=env, quick=quick)
    result.figures = ctx.figures
    started = time.monotonic()
    try:
        if phase.prepare is not None:
            await phase.prepare(ctx)
            ctx.figures["prepare_s"] = round(time.monotonic() - started, 2)
        with anyio.fail_after(QUICK_CEILING_S if quick else FULL_CEILING_S):
            async with ctx.stack:
                # A fresh MCP session per phase: one phase's broken session cannot fail the next.
                env.client = await ctx.stack.enter_async_context(
                    GatewayClient(env.gw.url, env.gw.headers(), env.seen)
                )
                await phase.run(ctx)
    except PhaseSkipped as exc:
        result.status, result.reason = Status.SKIPPED, str(exc)
    except PhaseFailed as exc:
        result.status, result.error = Status.FAILED, str(exc)
    except TimeoutError as exc:
        result.status, result.error = Status.FAILED, f"phase exceeded its ceiling\n{_trace(exc)}"
    except Exception as exc:
        result.status, result.error = Status.FAILED, _trace(exc)
    finally:
        env.client = None
        result.duration_s = round(time.monotonic() - started, 2)
    for what, gone in ctx.gone_checks:
        try:
            ok = gone()
        except Exception as exc:
            result.cleanup.append(CleanupCheck(what, False, repr(exc)))
        else:
            result.cleanup.append(CleanupCheck(what, ok))
    if not result.cleanup_ok and result.status is Status.PASSED:
        failed = ", ".join(c.what for c in result.cleanup if not c.ok)
        result.status, result.error = Status.FAILED, f"cleanup not verified: {failed}"
    return result


def _final_cleanup(env: Env) -> list[CleanupCheck]:
    checks = [
        CleanupCheck(f"gateway pid {gw.proc.pid} reaped", gw.proc.poll() is not None) for gw in env.gateways
    ]
    checks += [
        CleanupCheck(f"gateway {gw.proc.pid} exit code", gw.exit_code == 0, str(gw.exit_code))
        for gw in env.gateways
    ]
    if env.terminal is not None:
        checks += [CleanupCheck(f"libtmux-mcp pid {pid} gone", pid_gone(pid)) for pid in env.terminal.pids]
    if env.sshd is not None:
        checks.append(CleanupCheck(f"sshd pid {env.sshd.pid} gone", pid_gone(env.sshd.pid)))
    for marker in env.markers:
        left = processes_mentioning(marker)
        checks.append(CleanupCheck(f"no process mentions {marker}", not left, " ".join(left)))
    checks.append(CleanupCheck(f"{env.workdir} removed", not env.workdir.exists()))
    checks += [CleanupCheck(f"{path} removed", not path.exists()) for path in env.dirs]
    if env.sshd is not None:
        checks.append(CleanupCheck(f"{env.sshd.workdir} removed", not env.sshd.workdir.exists()))
    return checks


async def run_suite(*, quick: bool, only: Sequence[str] = (), out_dir: Path) -> tuple[Report, Path, Path]:
    phases = selected_phases(only)
    report = Report(mode="quick" if quick else "full", started_at=_now(), environment=_versions())
    started = time.monotonic()
    env: Env | None = None
    try:
        async with open_env(quick) as env:
            report.environment["gateway_url"] = env.gw.url
            report.environment["sshd"] = f"127.0.0.1:{env.sshd.port}" if env.sshd else env.sshd_reason
            report.environment["upstream"] = env.terminal.url if env.terminal else env.upstream_reason
            for phase in phases:
                report.phases.append(await _run_one(phase, env, quick))
    except Exception as exc:
        error = f"the run environment failed: {_trace(exc)}"
        done = {p.name for p in report.phases}
        for phase in phases:
            if phase.name not in done:
                status = Status.NOT_BUILT if phase.run is None else Status.FAILED
                report.phases.append(
                    PhaseResult(phase.name, phase.title, status, reason=phase.reason, error=error)
                )
    if env is not None:
        report.final_cleanup = _final_cleanup(env)
    report.duration_s = round(time.monotonic() - started, 2)
    report.finished_at = _now()
    json_path, md_path = report.write(out_dir)
    return report, json_path, md_path
