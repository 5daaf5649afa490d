"""Exec-path benchmark: raw ``ssh -S`` vs ``RemoteOps.run`` vs the gateway's ``remote_exec`` (MCP over HTTP
and over stdio), each on both carriers (one ssh per call, and the persistent agent channel).

Run from the repository root, as root (the sshd fixture creates users)::

    .venv/bin/python -m acceptance.bench_exec [--calls N] [--cold N] [--json] [--json-out FILE]
        [--spaced N [--gap-ms 50-200]]

A quick run (cold rows and RSS, short serial rows): ``--calls 10 --warmup 2 --cold 10`` (~30 s). The
gateway runs on this interpreter: run the script with a plain ``pip install .`` venv's python to measure
the RSS an operator's install has (a development venv also holds the test extra's packages, which
structlog and uvicorn import when they find them).

Everything is measured in ONE run against ONE throwaway sshd (``tests.fixtures.sshd.start_sshd``):

* ``raw``: ``ssh -F CFG -S SOCK sshd-plain true`` over a master this script starts itself (the baseline);
* ``RemoteOps.run``: in this process, target ``plain`` (``carrier = "ssh"``) and ``plain-agent``
  (``carrier = "agent"``) — the same sshd user, so the same master;
* ``gateway``: ``remote_exec`` with argv ``["true"]`` through the real gateway, over streamable HTTP (a
  subprocess, one session reused) and over stdio (spawned by the client), on both targets.

Serial calls are interleaved (raw, library ssh, library agent, gateway …, raw, …) after a warm-up so that
drift of the machine hits every subject alike; ratios are to the raw median of the same run. The burst rows
start 64 (and 256) calls at once; the raw burst is bounded by the same per-target channel limit the pool uses
(sshd's MaxSessions refuses more sessions per master). The cold rows time the first call of a fresh
``RemoteOps`` with no master (``ssh -G``, master start, the call; on the agent carrier also the agent's boot,
which ``auto`` does in the background while the first call goes over ssh), interleaved round by round with
their floor: a one-shot ``ssh target true`` without any master (TCP connect, key exchange, authentication,
one session), which no first call can undercut. ``--spaced N`` adds rows for calls spaced the way agents
call (an idle gap, uniform in ``--gap-ms``, before every call; raw, library, stdio, HTTP and both floors
round-robin), their ratios to the spaced raw row. The gateway's RSS is read when it is ready and again after
the first ``tools/list``. The aims of the agent issue are printed, not asserted.

Every process started (sshd, masters, gateways, agents) is terminated and reaped; the temporary directory is
removed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from acceptance._timing import Aim, p95, rss_kb, timed
from acceptance.harness.gateway_proc import run_gateway, write_config
from acceptance.harness.procs import stop_process
from acceptance.harness.sshd import SshdInstance, start_sshd
from remoteops import RemoteOps, TargetSpec, TransportSettings

__all__ = ["main"]

TARGET = "plain"  # carrier ssh
AGENT = "plain-agent"  # carrier agent, same sshd user and master
BURST = 64
BIG_BURST = 256
WARMUP = 10
COLD = 5
_READY_S = 60.0  # a ceiling (the master is up in ~0.2 s here)
_STOP_S = 5.0

ROW_RAW = "raw ssh -S (baseline)"
ROW_LIB = "RemoteOps.run, ssh carrier"
ROW_LIB_AGENT = "RemoteOps.run, agent carrier"
ROW_GW = "gateway remote_exec MCP/HTTP, ssh carrier"
ROW_GW_AGENT = "gateway remote_exec MCP/HTTP, agent carrier"
ROW_STDIO = "gateway remote_exec MCP/stdio, ssh carrier"
ROW_STDIO_AGENT = "gateway remote_exec MCP/stdio, agent carrier"
ROW_FLOOR = "gateway gateway_health MCP/HTTP (floor, no ssh)"
ROW_FLOOR_STDIO = "gateway gateway_health MCP/stdio (floor, no ssh)"
ROW_COLD_RAW = "cold floor: raw one-shot ssh target true (no master)"
ROW_COLD = "cold first call RemoteOps.run, ssh carrier"
ROW_COLD_AGENT = "cold first call RemoteOps.run, agent carrier (waits for the agent)"
ROW_COLD_AUTO = "cold first call RemoteOps.run, carrier auto (default)"
ROW_RAW_BURST = f"raw ssh -S, {BURST} concurrent"
ROW_LIB_BURST = f"RemoteOps.run ssh, {BURST} concurrent"
ROW_LIB_AGENT_BURST = f"RemoteOps.run agent, {BURST} concurrent"
ROW_GW_BURST = f"gateway HTTP ssh, {BURST} concurrent"
ROW_GW_AGENT_BURST = f"gateway HTTP agent, {BURST} concurrent"
ROW_RAW_BIG = f"raw ssh -S, {BIG_BURST} concurrent"
ROW_LIB_AGENT_BIG = f"RemoteOps.run agent, {BIG_BURST} concurrent"
ROW_GW_BIG = f"gateway HTTP ssh, {BIG_BURST} concurrent"
ROW_GW_AGENT_BIG = f"gateway HTTP agent, {BIG_BURST} concurrent"
SERIAL_ROWS = (
    ROW_RAW, ROW_LIB, ROW_LIB_AGENT, ROW_GW, ROW_GW_AGENT, ROW_STDIO, ROW_STDIO_AGENT,
    ROW_FLOOR, ROW_FLOOR_STDIO,
)  # fmt: skip
COLD_ROWS = (ROW_COLD_RAW, ROW_COLD, ROW_COLD_AGENT, ROW_COLD_AUTO)
BURST_ROWS = (ROW_RAW_BURST, ROW_LIB_BURST, ROW_LIB_AGENT_BURST, ROW_GW_BURST, ROW_GW_AGENT_BURST)
BIG_ROWS = (ROW_RAW_BIG, ROW_LIB_AGENT_BIG, ROW_GW_BIG, ROW_GW_AGENT_BIG)
ROWS = SERIAL_ROWS + COLD_ROWS + BURST_ROWS + BIG_ROWS
SPACED = " spaced"
SPACED_SUBJECTS = (ROW_RAW, ROW_LIB_AGENT, ROW_GW_AGENT, ROW_STDIO_AGENT, ROW_FLOOR, ROW_FLOOR_STDIO)
SPACED_ROWS = tuple(name + SPACED for name in SPACED_SUBJECTS)
GAP_MS = (50.0, 200.0)


@dataclass
class Row:
    subject: str
    calls: int
    median_ms: float
    p95_ms: float
    ratio: float = 0.0  # median / raw median (serial and cold rows) or / the raw burst of the same size
    wall_ms: float | None = None  # burst rows: time until the last of the burst finished
    failures: int = 0


@dataclass
class Report:
    calls: int
    channels: int
    mcp_mode: str
    warmup: int
    cold: int
    workdir: str  # removed when the run ends (the smoke test checks that)
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] | None = None
    protocol_version: str | None = None
    rows: list[Row] = field(default_factory=list)
    aims: list[Aim] = field(default_factory=list)
    gateway_rss_idle_kb: int | None = None  # ready, before any MCP request
    gateway_rss_listed_kb: int | None = None  # idle again after the first tools/list
    gateway_rss_after_kb: int | None = None
    spaced: int = 0  # spaced calls per subject (0: none)
    gap_ms: tuple[float, float] = GAP_MS


def _row(subject: str, samples_s: list[float], failures: int = 0, wall_s: float | None = None) -> Row:
    ms = [s * 1000 for s in samples_s] or [math.nan]
    return Row(
        subject=subject,
        calls=len(samples_s),
        median_ms=round(statistics.median(ms), 3),
        p95_ms=round(p95(ms), 3),
        wall_ms=None if wall_s is None else round(wall_s * 1000, 1),
        failures=failures,
    )


# -- the raw baseline: our own master, one `ssh -S` process per call ----------------------------------
@contextmanager
def raw_master(sshd: SshdInstance, sock: Path) -> Iterator[list[str]]:
    """Start a foreground ControlMaster; yield the argv prefix of a mux client; stop and reap it."""
    base = ["ssh", "-F", str(sshd.ssh_config)]
    proc = subprocess.Popen(
        [*base, "-M", "-N", "-T", "-S", str(sock), "-o", "ControlMaster=yes", "-o", "ControlPersist=no",
         "-o", "BatchMode=yes", sshd.alias(TARGET)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + _READY_S
        check = [*base, "-S", str(sock), "-O", "check", sshd.alias(TARGET)]
        while subprocess.run(check, capture_output=True, check=False, timeout=_READY_S).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the raw ControlMaster did not come up")
            time.sleep(0.02)  # startup poll of an external process (no event to wait on); not a measurement
        yield [*base, "-S", str(sock), sshd.alias(TARGET), "true"]
    finally:
        subprocess.run(
            [*base, "-S", str(sock), "-O", "exit", sshd.alias(TARGET)],
            capture_output=True,
            check=False,
            timeout=10,
        )
        stop_process(proc, _STOP_S)


def _raw_once(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=30)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"raw ssh failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return elapsed


async def _burst_of(
    size: int, call: Callable[[], Awaitable[None]], limit: int | None
) -> tuple[list[float], float, int]:
    """Start ``size`` calls at once; per-call latency includes queueing on ``limit``."""
    samples: list[float] = []
    failures = 0
    limiter = anyio.Semaphore(limit) if limit else None

    async def one() -> None:
        nonlocal failures
        started = time.perf_counter()
        try:
            if limiter is None:
                await call()
            else:
                async with limiter:
                    await call()
        except Exception:
            failures += 1
            return
        samples.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(size):
            tg.start_soon(one)
    return samples, time.perf_counter() - started, failures


# -- the benchmark --------------------------------------------------------------------------------
def _targets(sshd: SshdInstance) -> list[dict[str, Any]]:
    return [
        {"name": TARGET, "host": sshd.alias("plain"), "carrier": "ssh"},
        {"name": AGENT, "host": sshd.alias("plain"), "carrier": "agent"},
    ]


async def _cold_once(sshd: SshdInstance, control: Path, carrier: str) -> float:
    """First call of a fresh RemoteOps with no master (a new control directory each time)."""
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=control, carrier=carrier)
    async with RemoteOps(settings, [TargetSpec(name=TARGET, host=sshd.alias("plain"))]) as ops:
        started = time.perf_counter()
        result = await ops.run(TARGET, ["true"])
        elapsed = time.perf_counter() - started
        if result.exit_code != 0:
            raise RuntimeError(f"cold call failed: {result}")
    return elapsed


def _oneshot_argv(sshd: SshdInstance) -> list[str]:
    """``ssh target true`` with no master to use or create: the handshake floor of a cold first call."""
    return [
        "ssh", "-F", str(sshd.ssh_config), "-o", "BatchMode=yes", "-o", "ControlMaster=no",
        "-o", "ControlPath=none", sshd.alias(TARGET), "true",
    ]  # fmt: skip


async def _colds(sshd: SshdInstance, work: Path, samples: int) -> list[Row]:
    """The cold rows, interleaved round by round (floor, ssh, agent, auto) so drift hits each alike."""
    times: dict[str, list[float]] = {name: [] for name in COLD_ROWS}
    carriers = {ROW_COLD: "ssh", ROW_COLD_AGENT: "agent", ROW_COLD_AUTO: "auto"}
    oneshot = _oneshot_argv(sshd)
    for i in range(samples):
        times[ROW_COLD_RAW].append(await anyio.to_thread.run_sync(_raw_once, oneshot))
        for name, carrier in carriers.items():
            times[name].append(await _cold_once(sshd, work / f"cold-{carrier}-{i}", carrier))
    return [_row(name, times[name]) for name in COLD_ROWS]


def _aims(report: Report) -> list[Aim]:
    rows = {row.subject: row for row in report.rows}
    aims: list[Aim] = []

    def ratio(name: str, limit: float, what: str) -> None:
        row = rows[name]
        aims.append(Aim(what, f"<= {limit:.2f}x raw", f"{row.ratio:.2f}x", row.ratio <= limit))

    ratio(ROW_LIB_AGENT, 0.4, "RemoteOps.run on the agent")
    ratio(ROW_STDIO_AGENT, 0.5, "gateway remote_exec over stdio on the agent")
    ratio(ROW_GW_AGENT, 1.0, "gateway remote_exec over MCP/HTTP on the agent")
    if ROW_STDIO_AGENT + SPACED in rows:
        ratio(ROW_STDIO_AGENT + SPACED, 0.65, "spaced gateway remote_exec over stdio on the agent")
        ratio(ROW_GW_AGENT + SPACED, 0.9, "spaced gateway remote_exec over MCP/HTTP on the agent")
    ratio(ROW_GW_AGENT_BURST, 1.5, f"{BURST} concurrent gateway calls on the agent (per-call median)")
    big = rows[ROW_GW_AGENT_BIG].failures + rows[ROW_LIB_AGENT_BIG].failures
    aims.append(Aim(f"{BIG_BURST} concurrent calls on the agent", "0 failures", f"{big} failures", big == 0))
    cold, floor = rows[ROW_COLD_AUTO].median_ms, rows[ROW_COLD_RAW].median_ms
    measured = f"{cold:.0f} ms (one-shot ssh floor {floor:.0f} ms)"
    aims.append(Aim("first call on a cold target (auto)", "<= 220 ms", measured, cold <= 220))
    if report.gateway_rss_idle_kb is not None:
        rss = report.gateway_rss_idle_kb / 1024
        aims.append(Aim("gateway idle RSS", "<= 80 MB", f"{rss:.1f} MB", rss <= 80))
    return aims


async def _spaced(
    subjects: dict[str, Callable[[], Awaitable[None]]], calls: int, gap_ms: tuple[float, float]
) -> list[Row]:
    """Each subject's calls spaced the way agents call: an idle gap (uniform in ``gap_ms``, seeded) before
    every call, the subjects round-robin (each call follows another subject's call and a gap)."""
    rng = random.Random(29)
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(calls):
        for name, call in subjects.items():
            await anyio.sleep(rng.uniform(*gap_ms) / 1000)  # idle, untimed: what spaced calls have
            samples[name].append(await timed(call))
    return [_row(name + SPACED, samples[name]) for name in subjects]


async def _measure(
    sshd: SshdInstance,
    work: Path,
    calls: int,
    warmup: int,
    mode: str,
    cold: int,
    spaced: int = 0,
    gap_ms: tuple[float, float] = GAP_MS,
) -> Report:
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=work / "lib")
    report = Report(
        calls=calls,
        channels=settings.max_channels_per_target,
        mcp_mode=mode,
        warmup=warmup,
        cold=cold,
        workdir=str(work),
        load_before=os.getloadavg(),
    )
    gw_dir = work / "gw"
    gw_dir.mkdir()
    gw_config: dict[str, Any] = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(work / "gwc")},
        "targets": _targets(sshd),
    }
    stdio_dir = work / "gws"
    stdio_dir.mkdir()
    stdio_cfg = write_config(
        stdio_dir / "gateway.toml",
        {
            "state_dir": str(stdio_dir / "state"),
            "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(work / "gwsc")},
            "targets": _targets(sshd),
        },
    )
    stdio = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(stdio_cfg), "serve", "--stdio"]
    )
    lib_targets = [TargetSpec.model_validate(t) for t in _targets(sshd)]
    with (
        raw_master(sshd, work / "raw.sock") as raw_argv,
        run_gateway(gw_dir, gw_config) as gw,
    ):
        report.gateway_rss_idle_kb = rss_kb(gw.proc.pid)
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(120))
        async with (
            http,
            Client(streamable_http_client(gw.url, http_client=http), mode=mode) as client,
            Client(stdio, mode=mode) as stdio_client,
            RemoteOps(settings, lib_targets) as ops,
        ):
            report.protocol_version = client.protocol_version
            await client.list_tools()
            report.gateway_rss_listed_kb = rss_kb(gw.proc.pid)

            def gw_call(target: str, via: Client = client) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    result = await via.call_tool("remote_exec", {"target": target, "argv": ["true"]})
                    if result.is_error or (result.structured_content or {}).get("exit_code") != 0:
                        raise RuntimeError(f"remote_exec failed: {result}")

                return call

            def floor_call(via: Client) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    result = await via.call_tool("gateway_health", {})
                    if result.is_error:
                        raise RuntimeError(f"gateway_health failed: {result}")

                return call

            def lib_call(target: str) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    result = await ops.run(target, ["true"])
                    if result.exit_code != 0:
                        raise RuntimeError(f"ops.run failed: {result}")

                return call

            async def raw_call() -> None:
                await anyio.to_thread.run_sync(_raw_once, raw_argv)

            subjects: dict[str, Callable[[], Awaitable[None]]] = {
                ROW_LIB: lib_call(TARGET),
                ROW_LIB_AGENT: lib_call(AGENT),
                ROW_GW: gw_call(TARGET),
                ROW_GW_AGENT: gw_call(AGENT),
                ROW_STDIO: gw_call(TARGET, stdio_client),
                ROW_STDIO_AGENT: gw_call(AGENT, stdio_client),
                ROW_FLOOR: floor_call(client),
                ROW_FLOOR_STDIO: floor_call(stdio_client),
            }
            for _ in range(warmup):
                _raw_once(raw_argv)
                for call in subjects.values():
                    await call()
            samples: dict[str, list[float]] = {name: [] for name in SERIAL_ROWS}
            for _ in range(calls):
                samples[ROW_RAW].append(_raw_once(raw_argv))  # blocking on purpose: the cheapest spawn
                for name, call in subjects.items():
                    samples[name].append(await timed(call))
            serial = [_row(name, samples[name]) for name in SERIAL_ROWS]
            spaced_rows: list[Row] = []
            if spaced:

                async def raw_blocking() -> None:
                    _raw_once(raw_argv)  # as in the serial rows

                chosen = {ROW_RAW: raw_blocking, **{n: subjects[n] for n in SPACED_SUBJECTS if n != ROW_RAW}}
                spaced_rows = await _spaced(chosen, spaced, gap_ms)

            channels = settings.max_channels_per_target
            bursts = []
            for name, call, limit in (
                (ROW_RAW_BURST, raw_call, channels),
                (ROW_LIB_BURST, lib_call(TARGET), None),
                (ROW_LIB_AGENT_BURST, lib_call(AGENT), None),
                (ROW_GW_BURST, gw_call(TARGET), None),
                (ROW_GW_AGENT_BURST, gw_call(AGENT), None),
            ):
                got, wall, failed = await _burst_of(BURST, call, limit)
                bursts.append(_row(name, got, failed, wall))
            bigs = []
            for name, call, limit in (
                (ROW_RAW_BIG, raw_call, channels),
                (ROW_LIB_AGENT_BIG, lib_call(AGENT), None),
                (ROW_GW_BIG, gw_call(TARGET), None),
                (ROW_GW_AGENT_BIG, gw_call(AGENT), None),
            ):
                got, wall, failed = await _burst_of(BIG_BURST, call, limit)
                bigs.append(_row(name, got, failed, wall))
        report.gateway_rss_after_kb = rss_kb(gw.proc.pid)
    colds = await _colds(sshd, work, cold)
    report.load_after = os.getloadavg()
    base = serial[0].median_ms
    for row in serial + colds:
        row.ratio = round(row.median_ms / base, 2) if base else math.nan
    for group in (bursts, bigs):
        burst_base = group[0].median_ms
        for row in group:
            row.ratio = round(row.median_ms / burst_base, 2) if burst_base else math.nan
    spaced_base = spaced_rows[0].median_ms if spaced_rows else math.nan
    for row in spaced_rows:
        row.ratio = round(row.median_ms / spaced_base, 2) if spaced_base else math.nan
    report.spaced, report.gap_ms = spaced, gap_ms
    report.rows = serial + spaced_rows + colds + bursts + bigs
    report.aims = _aims(report)
    return report


def render_markdown(report: Report) -> str:
    load = ", ".join(f"{x:.2f}" for x in report.load_before)
    after = ", ".join(f"{x:.2f}" for x in report.load_after) if report.load_after else "?"
    lines = [
        f"Exec path, {report.calls} serial calls per subject "
        f"(interleaved, after {report.warmup} warm-up calls); "
        f"bursts of {BURST} and {BIG_BURST} (raw bounded to {report.channels} channels like the pool); "
        f"{report.cold} cold first calls per carrier, interleaved with the one-shot floor. "
        + (
            f"Spaced rows: {report.spaced} calls per subject, round-robin, an idle gap of "
            f"{report.gap_ms[0]:.0f}-{report.gap_ms[1]:.0f} ms before each (ratios to the spaced raw row). "
            if report.spaced
            else ""
        )
        + f"MCP client mode {report.mcp_mode}, protocol "
        f"{report.protocol_version}. Load average before: {load}; after: {after} ({os.cpu_count()} CPUs).",
        "",
        "| subject | calls | median ms | p95 ms | ratio to raw | burst wall ms | failures |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report.rows:
        wall = "" if row.wall_ms is None else f"{row.wall_ms:.1f}"
        lines.append(
            f"| {row.subject} | {row.calls} | {row.median_ms:.2f} | {row.p95_ms:.2f} | "
            f"{row.ratio:.2f}x | {wall} | {row.failures} |"
        )
    if report.gateway_rss_idle_kb is not None:
        rss_listed, rss_after = report.gateway_rss_listed_kb, report.gateway_rss_after_kb
        lines += [
            "",
            f"Gateway RSS: idle {report.gateway_rss_idle_kb / 1024:.1f} MB, "
            f"after the first tools/list {rss_listed / 1024 if rss_listed else math.nan:.1f} MB, "
            f"after the run {rss_after / 1024 if rss_after else math.nan:.1f} MB "
            f"(gateway interpreter {sys.executable})",
        ]
    if report.aims:
        lines += ["", "| aim | target | measured | met |", "|---|---|---|---|"]
        lines += [
            f"| {a.what} | {a.target} | {a.measured} | {'yes' if a.met else 'no'} |" for a in report.aims
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acceptance.bench_exec", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=100, help="timed serial calls per subject (default 100)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"untimed calls first (default {WARMUP})")
    parser.add_argument(
        "--cold", type=int, default=COLD, help=f"cold first calls per carrier and floor row (default {COLD})"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    parser.add_argument(
        "--mode",
        default="legacy",
        help="mcp.Client connect mode: legacy (handshake session, reused; default), auto or 2026-07-28",
    )
    parser.add_argument(
        "--spaced",
        type=int,
        default=0,
        metavar="N",
        help="also N spaced calls per subject: an idle gap before each, round-robin (default 0: none)",
    )
    parser.add_argument(
        "--gap-ms",
        default=f"{GAP_MS[0]:.0f}-{GAP_MS[1]:.0f}",
        metavar="MIN-MAX",
        help="the spaced rows' idle gap, uniform between MIN and MAX ms (default %(default)s)",
    )
    parser.add_argument("--json-out", type=Path, metavar="FILE", help="also write the report as JSON to FILE")
    args = parser.parse_args(argv)
    low, _, high = args.gap_ms.partition("-")
    gap = (float(low), float(high or low))
    if args.calls < 1 or args.warmup < 0 or args.cold < 1:
        parser.error("--calls and --cold must be at least 1 and --warmup at least 0")
    # short: ControlPath must stay under 108 bytes
    work = Path(tempfile.mkdtemp(prefix="rogb-", dir="/tmp"))
    try:
        os.chmod(work, 0o700)
        with start_sshd() as sshd:
            report = anyio.run(
                _measure,
                sshd,
                work,
                args.calls,
                args.warmup,
                args.mode,
                args.cold,
                args.spaced,
                gap,
                backend="asyncio",
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(render_markdown(report))
    failed = sum(row.failures for row in report.rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
