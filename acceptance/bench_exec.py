"""Exec-path benchmark: raw ``ssh -S`` vs ``RemoteOps.run`` vs the gateway's ``remote_exec`` over MCP/HTTP.

Run from the repository root, as root (the sshd fixture creates users)::

    .venv/bin/python -m acceptance.bench_exec [--calls N] [--json]

Everything is measured in ONE run against ONE throwaway sshd (``tests.fixtures.sshd.start_sshd``):

* ``raw``: ``ssh -F CFG -S SOCK sshd-plain true`` over a master this script starts itself (the baseline);
* ``remoteops``: ``RemoteOps.run("plain", ["true"])`` in this process (transport cost without MCP/HTTP);
* ``gateway``: ``remote_exec`` with argv ``["true"]`` through the real gateway subprocess, called by an MCP
  client over streamable HTTP (one session reused for every call).

Serial calls are interleaved (raw, remoteops, gateway, raw, ...) after a warm-up so that drift of the machine
hits every subject alike; ratios are to the raw median of the same run. The burst rows start 64 calls at once;
the raw burst is bounded by the same per-target channel limit the pool uses (sshd's MaxSessions refuses more
sessions per master), the gateway queues its own burst on that limit.

Every process started (sshd, masters, gateway) is terminated and reaped; the temporary directory is removed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
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
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from remoteops import RemoteOps, TargetSpec, TransportSettings
from tests.fixtures.gateway_proc import run_gateway
from tests.fixtures.procs import stop_process
from tests.fixtures.sshd import SshdInstance, start_sshd

__all__ = ["main"]

TARGET = "plain"
BURST = 64
WARMUP = 10
_READY_S = 15.0
_STOP_S = 5.0

ROW_RAW = "raw ssh -S (baseline)"
ROW_LIB = "remoteops RemoteOps.run"
ROW_GW = "gateway remote_exec (MCP/HTTP)"
ROW_FLOOR = "gateway gateway_health (MCP/HTTP floor, no ssh)"
ROW_RAW_BURST = f"raw ssh -S, {BURST} concurrent"
ROW_LIB_BURST = f"remoteops, {BURST} concurrent"
ROW_GW_BURST = f"gateway remote_exec, {BURST} concurrent"
ROWS = (ROW_RAW, ROW_LIB, ROW_GW, ROW_FLOOR, ROW_RAW_BURST, ROW_LIB_BURST, ROW_GW_BURST)


@dataclass
class Row:
    subject: str
    calls: int
    median_ms: float
    p95_ms: float
    ratio: float = 0.0  # median / raw median (serial rows) or burst median / raw burst median
    wall_ms: float | None = None  # burst rows: time until the last of the burst finished
    failures: int = 0


@dataclass
class Report:
    calls: int
    channels: int
    mcp_mode: str
    warmup: int
    workdir: str  # removed when the run ends (the smoke test checks that)
    protocol_version: str | None = None
    rows: list[Row] = field(default_factory=list)
    gateway_rss_idle_kb: int | None = None
    gateway_rss_after_kb: int | None = None


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _row(subject: str, samples_s: list[float], failures: int = 0, wall_s: float | None = None) -> Row:
    ms = [s * 1000 for s in samples_s] or [math.nan]
    return Row(
        subject=subject,
        calls=len(samples_s),
        median_ms=round(statistics.median(ms), 3),
        p95_ms=round(_p95(ms), 3),
        wall_ms=None if wall_s is None else round(wall_s * 1000, 1),
        failures=failures,
    )


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


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


async def _burst(call: Callable[[], Awaitable[None]], limit: int | None) -> tuple[list[float], float, int]:
    """Start BURST calls at once; per-call latency includes queueing on ``limit``."""
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
        for _ in range(BURST):
            tg.start_soon(one)
    return samples, time.perf_counter() - started, failures


# -- the benchmark --------------------------------------------------------------------------------
async def _measure(sshd: SshdInstance, work: Path, calls: int, warmup: int, mode: str) -> Report:
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=work / "lib")
    report = Report(
        calls=calls,
        channels=settings.max_channels_per_target,
        mcp_mode=mode,
        warmup=warmup,
        workdir=str(work),
    )
    gw_dir = work / "gw"
    gw_dir.mkdir()
    gw_config: dict[str, Any] = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(work / "gwc")},
        "targets": [{"name": TARGET, "host": sshd.alias(TARGET)}],
    }
    with (
        raw_master(sshd, work / "raw.sock") as raw_argv,
        run_gateway(gw_dir, gw_config) as gw,
    ):
        report.gateway_rss_idle_kb = _rss_kb(gw.proc.pid)
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(60))
        ops = RemoteOps(settings, [TargetSpec(name=TARGET, host=sshd.alias(TARGET))])
        async with http, Client(streamable_http_client(gw.url, http_client=http), mode=mode) as client, ops:
            report.protocol_version = client.protocol_version

            async def gw_call() -> None:
                result = await client.call_tool("remote_exec", {"target": TARGET, "argv": ["true"]})
                if result.is_error or (result.structured_content or {}).get("exit_code") != 0:
                    raise RuntimeError(f"remote_exec failed: {result}")

            async def floor_call() -> None:
                result = await client.call_tool("gateway_health", {})
                if result.is_error:
                    raise RuntimeError(f"gateway_health failed: {result}")

            async def lib_call() -> None:
                result = await ops.run(TARGET, ["true"])
                if result.exit_code != 0:
                    raise RuntimeError(f"ops.run failed: {result}")

            async def raw_call() -> None:
                await anyio.to_thread.run_sync(_raw_once, raw_argv)

            async def timed(call: Callable[[], Awaitable[None]]) -> float:
                started = time.perf_counter()
                await call()
                return time.perf_counter() - started

            for _ in range(warmup):
                _raw_once(raw_argv)
                await lib_call()
                await gw_call()
                await floor_call()
            raw_s: list[float] = []
            lib_s: list[float] = []
            gw_s: list[float] = []
            floor_s: list[float] = []
            for _ in range(calls):
                raw_s.append(_raw_once(raw_argv))  # blocking on purpose: the cheapest way to spawn ssh
                lib_s.append(await timed(lib_call))
                gw_s.append(await timed(gw_call))
                floor_s.append(await timed(floor_call))
            serial = [
                _row(ROW_RAW, raw_s),
                _row(ROW_LIB, lib_s),
                _row(ROW_GW, gw_s),
                _row(ROW_FLOOR, floor_s),
            ]

            channels = settings.max_channels_per_target
            raw_b, raw_wall, raw_fail = await _burst(raw_call, channels)
            lib_b, lib_wall, lib_fail = await _burst(lib_call, None)
            gw_b, gw_wall, gw_fail = await _burst(gw_call, None)
            bursts = [
                _row(ROW_RAW_BURST, raw_b, raw_fail, raw_wall),
                _row(ROW_LIB_BURST, lib_b, lib_fail, lib_wall),
                _row(ROW_GW_BURST, gw_b, gw_fail, gw_wall),
            ]
        report.gateway_rss_after_kb = _rss_kb(gw.proc.pid)
    base = serial[0].median_ms
    for row in serial:
        row.ratio = round(row.median_ms / base, 2) if base else math.nan
    burst_base = bursts[0].median_ms
    for row in bursts:
        row.ratio = round(row.median_ms / burst_base, 2) if burst_base else math.nan
    report.rows = serial + bursts
    return report


def render_markdown(report: Report) -> str:
    lines = [
        f"Exec path, {report.calls} serial calls per subject "
        f"(interleaved, after {report.warmup} warm-up calls); "
        f"bursts of {BURST} (raw bounded to {report.channels} channels like the pool). "
        f"MCP client mode {report.mcp_mode}, protocol {report.protocol_version}.",
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
        after = report.gateway_rss_after_kb
        lines += [
            "",
            f"Gateway RSS: idle {report.gateway_rss_idle_kb / 1024:.1f} MB, "
            f"after the run {after / 1024 if after else math.nan:.1f} MB",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acceptance.bench_exec", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=100, help="timed serial calls per subject (default 100)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"untimed calls first (default {WARMUP})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    parser.add_argument(
        "--mode",
        default="legacy",
        help="mcp.Client connect mode: legacy (handshake session, reused; default), auto or 2026-07-28",
    )
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 0:
        parser.error("--calls must be at least 1 and --warmup at least 0")
    # short: ControlPath must stay under 108 bytes
    work = Path(tempfile.mkdtemp(prefix="rogb-", dir="/tmp"))
    try:
        os.chmod(work, 0o700)
        with start_sshd() as sshd:
            report = anyio.run(_measure, sshd, work, args.calls, args.warmup, args.mode, backend="asyncio")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(render_markdown(report))
    failed = sum(row.failures for row in report.rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
