"""Real third-party clients: the official conformance suite (failing checks listed, not just counted) against
a gateway without auth (the suite cannot send a header), and the MCP Inspector CLI against the bearer-auth
gateway — listing, a successful call, and a *failed* call whose error code must reach the Inspector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from acceptance._mcp import error_of
from acceptance._registry import PhaseContext, phase
from acceptance.harness.conformance_scenarios import ALPHA_NOT_TESTABLE, ALPHA_RUN_SCENARIOS, RUN_SCENARIOS
from acceptance.harness.gateway_proc import GatewayProcess
from acceptance.harness.node_tools import (
    CONFORMANCE,
    CONFORMANCE_ALPHA,
    INSPECTOR,
    InstalledTool,
    NodeTool,
    ensure_tool,
)

__all__ = ["KNOWN_GATEWAY_BUGS", "conformance_and_inspector"]

QUICK_SCENARIOS = ("server-initialize", "tools-list")
CLIENT_TIMEOUT_S = 90.0

KNOWN_GATEWAY_BUGS: dict[str, str] = {}
"""Checks of this phase known to fail because of a reported gateway bug: a failure is recorded under
``known_bugs`` (not hidden); a check that passes again is recorded under ``known_bugs_fixed``, so the
entry can be removed."""


def _install(tool: NodeTool) -> InstalledTool:
    return ensure_tool(tool)


async def _tool(ctx: PhaseContext, tool: NodeTool) -> InstalledTool:
    try:
        return await anyio.to_thread.run_sync(_install, tool)
    except pytest.skip.Exception as exc:
        ctx.skip(str(exc))
    except pytest.fail.Exception as exc:
        ctx.fail(f"installing {tool.name}: {exc}")


async def _scenario(
    suite: InstalledTool, gw: GatewayProcess, work: Path, scenario: str, tolerated: dict[str, str]
) -> tuple[list[dict[str, Any]], int]:
    out_dir = work / "results"
    argv = ["server", "--url", gw.url, "--scenario", scenario, "--output-dir", str(out_dir)]
    if tolerated:
        baseline = work / "expected-failures.yaml"
        entries = "".join(f"  - {json.dumps(f'{scenario}:{check}')}\n" for check in tolerated)
        baseline.write_text(f"server:\n{entries}", encoding="utf-8")
        argv += ["--expected-failures", str(baseline)]
    run = await anyio.to_thread.run_sync(
        lambda: suite.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=work / "home")
    )
    reports = sorted(out_dir.glob("*/checks.json"))
    if len(reports) != 1:
        return [
            {"id": "(no checks.json)", "status": "FAILURE", "details": run.describe()[-2000:]}
        ], run.returncode
    return json.loads(reports[0].read_text(encoding="utf-8")), run.returncode


async def _suite(
    ctx: PhaseContext, suite: InstalledTool, label: str, scenarios: tuple[str, ...], gw: GatewayProcess
) -> None:
    counts = {"SUCCESS": 0, "FAILURE": 0, "WARNING": 0, "SKIPPED": 0, "INFO": 0}
    failures: list[dict[str, Any]] = ctx.figures.setdefault("failures", [])
    tolerated_seen = 0
    for scenario in scenarios:
        work = ctx.env.workdir / f"conformance-{label}-{scenario}"
        work.mkdir()
        tolerated = ALPHA_NOT_TESTABLE.get(scenario, {}) if label == "alpha" else {}
        checks, returncode = await _scenario(suite, gw, work, scenario, tolerated)
        for check in checks:
            status = str(check.get("status"))
            counts[status] = counts.get(status, 0) + 1
            if status == "FAILURE":
                if check.get("id") in tolerated:
                    tolerated_seen += 1
                    continue
                failures.append(
                    {
                        "suite": label,
                        "scenario": scenario,
                        "check": check.get("id"),
                        "details": check.get("details"),
                    }
                )
        if returncode != 0 and not any(f["scenario"] == scenario for f in failures):
            failures.append(
                {"suite": label, "scenario": scenario, "check": "(exit code)", "details": returncode}
            )
        ctx.check(counts["SUCCESS"] > 0, f"{label} {scenario}: no check succeeded")
    ctx.figures[f"{label}_scenarios"] = len(scenarios)
    ctx.figures[f"{label}_checks"] = counts
    ctx.figures[f"{label}_tolerated_not_testable"] = tolerated_seen


async def _inspect(ctx: PhaseContext, inspector: InstalledTool, *args: str) -> dict[str, Any]:
    gw = ctx.env.gw
    home = ctx.env.workdir / "inspector-home"
    argv = ["--cli", gw.url, "--transport", "http", *args, "--format", "json", "--stored-auth-only"]
    argv += ["--header", f"Authorization: Bearer {gw.token}"]  # variadic: last
    run = await anyio.to_thread.run_sync(lambda: inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=home))
    ctx.env.seen.append(run.stdout + run.stderr)
    # The result is on stdout (also when the tool failed: exit 5, "tool_is_error" on stderr); the
    # Inspector's own errors are on stderr.
    payload: dict[str, Any] = {"returncode": run.returncode}
    for stream, text in (("stderr", run.stderr), ("stdout", run.stdout)):
        try:
            parsed = json.loads(text)
        except ValueError:
            continue
        if not isinstance(parsed, dict):
            continue
        payload.update(parsed if stream == "stdout" else {"inspector_error": parsed.get("error")})
    if "result" not in payload and "inspector_error" not in payload:
        ctx.fail(f"the Inspector printed no JSON:\n{run.describe()}")
    return payload


def _known(ctx: PhaseContext, name: str, ok: bool, detail: str) -> None:
    if ok:
        if name in KNOWN_GATEWAY_BUGS:
            ctx.figures.setdefault("known_bugs_fixed", []).append(name)
        return
    if name not in KNOWN_GATEWAY_BUGS:
        ctx.fail(f"{name}: {detail}")
    ctx.figures.setdefault("known_bugs", {})[name] = f"{KNOWN_GATEWAY_BUGS[name]} (seen: {detail[:300]})"


async def _install_tools(ctx: PhaseContext) -> None:
    """The pinned npm tools (a first run downloads them: bounded by node_tools' own install ceiling)."""
    for tool in (CONFORMANCE, INSPECTOR) if ctx.quick else (CONFORMANCE, INSPECTOR, CONFORMANCE_ALPHA):
        ctx.state[tool.name] = await _tool(ctx, tool)


@phase(
    "conformance",
    "conformance suite and MCP Inspector against the real gateway (failures included)",
    prepare=_install_tools,
)
async def conformance_and_inspector(ctx: PhaseContext) -> None:
    env = ctx.env
    conformance: InstalledTool = ctx.state[CONFORMANCE.name]
    inspector: InstalledTool = ctx.state[INSPECTOR.name]
    open_gw = await ctx.stack.enter_async_context(
        env.extra_gateway("conformance", {"auth": {"mode": "none", "allow_no_auth": True}})
    )
    ctx.created(
        f"unauthenticated gateway {open_gw.proc.pid} stopped", lambda: open_gw.proc.poll() is not None
    )
    await _suite(ctx, conformance, "stable", QUICK_SCENARIOS if ctx.quick else RUN_SCENARIOS, open_gw)
    if not ctx.quick:
        await _suite(ctx, ctx.state[CONFORMANCE_ALPHA.name], "alpha", ALPHA_RUN_SCENARIOS, open_gw)
    failures = ctx.figures["failures"]
    ctx.check(not failures, f"conformance failures: {json.dumps(failures)[:3000]}")

    listed = await _inspect(ctx, inspector, "--method", "tools/list")
    names = [tool["name"] for tool in listed.get("result", {}).get("tools", [])]
    ctx.check(listed["returncode"] == 0 and "gateway_health" in names, f"Inspector tools/list: {listed}")
    if not ctx.quick:  # quick: listing and the failed call; full: a successful call too
        called = await _inspect(ctx, inspector, "--method", "tools/call", "--tool-name", "gateway_health")
        result = called.get("result", {})
        ctx.check(
            called["returncode"] == 0 and result.get("isError") is False,
            f"Inspector gateway_health: {called}",
        )
        ctx.check(
            result.get("structuredContent", {}).get("pid") == env.gw.pid, "Inspector: wrong structuredContent"
        )
    if env.sshd is not None:
        failed = await _inspect(
            ctx, inspector, "--method", "tools/call", "--tool-name", "remote_exec",
            "--tool-arg", "target=badhostkey", "--tool-arg", 'argv=["true"]',
        )  # fmt: skip
        err = error_of(failed.get("result", {}))
        code = None if err is None else err.get("code")
        _known(ctx, "inspector_sees_error_code", code == "host_key_error", json.dumps(failed)[:500])
        ctx.figures["inspector_failed_call_code"] = code
    ctx.figures["inspector_tools_listed"] = len(names)
