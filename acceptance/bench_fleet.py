"""Fleet benchmark: ``exec_many true`` over many loopback targets vs raw parallel OpenSSH, cold and warm.

Run from the repository root, as root (the sshd fixture creates users)::

    .venv/bin/python -m acceptance.bench_fleet [--targets 200] [--sshds 4] [--forks 32] [--json-out FILE]

The targets are distinct aliases of a few throwaway sshds (``acceptance.harness.fleet_hosts``: each alias
has its own ``HostKeyAlias``, so its own identity, master and agent). In ONE run, in this order:

* **raw cold**: ``xargs -P FORKS`` running ``ssh -F CFG <alias> true`` over every alias, no master (each a
  full connection: TCP, key exchange, authentication, one session);
* **gateway cold**: a fresh gateway (``serve --http``, a subprocess, no master, no agent) answers one
  ``exec_many`` of ``true`` with ``forks`` FORKS over every target;
* **gateway warm**: the same call again on the same gateway, after one untimed call more (masters up, and
  the agents the cold call's targets started in the background booted; the row says how many are up);
* **raw warm**: ``ssh -S <master socket>`` over masters this script started first (one per alias), again
  through ``xargs -P FORKS``.

Per-target times: the records' ``duration_ms`` for the gateway, the wrapper's own clock around each ssh for
the raw runs. The gateway's RSS and open file descriptors are sampled every 20 ms during its calls (peaks
reported), its live masters read from ``gateway_health`` after each. The aims of issue 26 are printed, not
asserted. Every process started is stopped and reaped; the temporary directories are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from acceptance._timing import Aim, p95, rss_kb
from acceptance.harness.fleet_hosts import FleetHosts, write_fleet_config
from acceptance.harness.gateway_proc import run_gateway
from acceptance.harness.sshd import start_sshd

__all__ = ["ROWS", "main"]

ROW_RAW_COLD = "raw xargs -P N ssh <alias> true (cold, no master)"
ROW_GW_COLD = "gateway exec_many true (cold pool)"
ROW_GW_WARM = "gateway exec_many true (warm: masters and agents up)"
ROW_RAW_WARM = "raw xargs -P N ssh -S <master> <alias> true (warm)"
ROWS = (ROW_RAW_COLD, ROW_GW_COLD, ROW_GW_WARM, ROW_RAW_WARM)
_CALL_S = 600.0
_RAW_S = 600.0


@dataclass
class Row:
    subject: str
    targets: int
    wall_s: float
    p50_ms: float
    p95_ms: float
    failures: int
    peak_rss_mb: float | None = None
    peak_fds: int | None = None
    masters_open: int | None = None
    agents_up: int | None = None


@dataclass
class Report:
    targets: int
    sshds: int
    forks: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] | None = None
    rows: list[Row] = field(default_factory=list)
    aims: list[Aim] = field(default_factory=list)
    workdir: str = ""


def _row(subject: str, wall_s: float, per_ms: list[float], failures: int, **extra: Any) -> Row:
    ms = sorted(per_ms) or [math.nan]
    return Row(
        subject=subject,
        targets=len(per_ms),
        wall_s=round(wall_s, 3),
        p50_ms=round(statistics.median(ms), 1),
        p95_ms=round(p95(ms), 1),
        failures=failures,
        **extra,
    )


_WRAP = 's=$(date +%s%N); ssh "$@" true >/dev/null 2>&1; r=$?; echo "$s $(date +%s%N) $r"'


def _raw(hosts: FleetHosts, forks: int, masters: Path | None) -> tuple[float, list[float], int]:
    """``xargs -P forks`` over every alias, each ssh timed by a tiny sh wrapper; (wall, per-target ms,
    failures)."""
    mux = ["-o", "ControlMaster=no", "-S", f"{masters}/%n"] if masters is not None else []
    argv = [
        "xargs", "-P", str(forks), "-n", "1",
        "sh", "-c", _WRAP, "ssh", "-F", str(hosts.ssh_config), "-o", "BatchMode=yes", *mux,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        input="\n".join(hosts.aliases) + "\n",
        capture_output=True,
        text=True,
        timeout=_RAW_S,
        check=False,
    )
    wall = time.perf_counter() - started
    per: list[float] = []
    failures = 0
    for line in done.stdout.splitlines():
        start, end, status = line.split()
        per.append((int(end) - int(start)) / 1e6)
        failures += status != "0"
    failures += len(hosts.aliases) - len(per)
    return wall, per, failures


@contextmanager
def _raw_masters(hosts: FleetHosts, forks: int, directory: Path) -> Iterator[Path]:
    """One ControlMaster per alias (``ssh -M -N -f``, sockets named by alias), all stopped afterwards."""
    directory.mkdir(mode=0o700)
    argv = [
        "xargs", "-P", str(forks), "-I{}",
        "ssh", "-F", str(hosts.ssh_config), "-o", "BatchMode=yes", "-o", "ControlMaster=yes",
        "-o", "ControlPersist=600", "-S", f"{directory}/{{}}", "-fN", "{}",
    ]  # fmt: skip
    try:
        # the masters go to the background holding what they were given: no pipes, or run() waits for them
        subprocess.run(
            argv,
            input="\n".join(hosts.aliases) + "\n",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=_RAW_S,
            check=False,
        )
        yield directory
    finally:
        for alias in hosts.aliases:
            sock = directory / alias
            if sock.exists():
                subprocess.run(
                    ["ssh", "-F", str(hosts.ssh_config), "-S", str(sock), "-O", "exit", alias],
                    capture_output=True,
                    timeout=10,
                    check=False,
                )


class _Sampler:
    """Peak RSS and open descriptors of one process, sampled every 20 ms while running."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_kb = 0
        self.peak_fds = 0

    def sample(self) -> None:
        rss = rss_kb(self.pid)
        if rss is not None:
            self.peak_rss_kb = max(self.peak_rss_kb, rss)
        with contextlib.suppress(OSError):
            self.peak_fds = max(self.peak_fds, len(os.listdir(f"/proc/{self.pid}/fd")))

    async def run(self) -> None:
        while True:
            self.sample()
            await anyio.sleep(0.02)


async def _gateway_rows(hosts: FleetHosts, forks: int, work: Path, report: Report) -> None:
    config: dict[str, Any] = {
        "transport": {
            "ssh_config_file": str(hosts.ssh_config),
            "control_dir": str(work / "gwc"),
            "max_masters": max(32, len(hosts.aliases) + 8),
        },
        "fleet": {"forks": forks, "max_forks": max(64, forks)},
        "targets": [{"name": alias, "host": alias} for alias in hosts.aliases],
        "groups": {"all": list(hosts.aliases)},
        "tools": {"toolsets": ["inspect", "execute"]},
        "log_level": "warning",
    }
    gw_dir = work / "gw"
    gw_dir.mkdir()
    with run_gateway(gw_dir, config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(_CALL_S))
        async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
            await client.call_tool("gateway_health", {})
            for subject in (ROW_GW_COLD, ROW_GW_WARM):
                if subject == ROW_GW_WARM:  # warm: every agent the cold call started in the background is up
                    await client.call_tool("exec_many", {"group": "all", "argv": ["true"], "forks": forks})
                sampler = _Sampler(gw.pid)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sampler.run)
                    started = time.perf_counter()
                    result = await client.call_tool(
                        "exec_many", {"group": "all", "argv": ["true"], "forks": forks}
                    )
                    wall = time.perf_counter() - started
                    tg.cancel_scope.cancel()
                out = result.structured_content or {}
                records = out.get("records", [])
                per = [r["duration_ms"] for r in records if r.get("duration_ms") is not None]
                failures = len(hosts.aliases) - out.get("summary", {}).get("counts", {}).get("ok", 0)
                health = (await client.call_tool("gateway_health", {})).structured_content or {}
                masters = health.get("transport", {}).get("live_masters")
                carriers = health.get("transport", {}).get("carriers", {}).values()
                agents = sum(1 for c in carriers if c.get("agent_alive"))
                report.rows.append(
                    _row(
                        subject,
                        wall,
                        per,
                        failures,
                        peak_rss_mb=round(sampler.peak_rss_kb / 1024, 1),
                        peak_fds=sampler.peak_fds,
                        masters_open=masters,
                        agents_up=agents,
                    )
                )


def _aims(report: Report) -> list[Aim]:
    rows = {row.subject: row for row in report.rows}
    cold, warm = rows[ROW_GW_COLD], rows[ROW_GW_WARM]
    raw_cold, raw_warm = rows[ROW_RAW_COLD], rows[ROW_RAW_WARM]
    cold_ratio = cold.wall_s / raw_cold.wall_s
    warm_ratio = warm.wall_s / raw_warm.wall_s
    peak = max(cold.peak_rss_mb or 0.0, warm.peak_rss_mb or 0.0)
    return [
        Aim("cold wall vs raw xargs -P", "≤ 1.2x", f"{cold_ratio:.2f}x", cold_ratio <= 1.2),
        Aim("cold failures", "0", str(cold.failures), cold.failures == 0),
        Aim("gateway peak RSS", "≤ 150 MB", f"{peak:.1f} MB", peak <= 150),
        Aim("warm wall vs raw ssh -S", "≤ 0.5x", f"{warm_ratio:.2f}x", warm_ratio <= 0.5),
    ]


def _measure(targets: int, sshds: int, forks: int, work: Path) -> Report:
    report = Report(targets=targets, sshds=sshds, forks=forks, load_before=os.getloadavg(), workdir=str(work))
    per_sshd = math.ceil(targets / sshds)
    with ExitStack() as stack:
        servers = [stack.enter_context(start_sshd()) for _ in range(sshds)]
        hosts = write_fleet_config(work, servers, per_sshd)
        if len(hosts.aliases) > targets:  # exactly ``targets`` aliases, spread over the sshds
            names = hosts.aliases[:targets]
            hosts = FleetHosts(hosts.ssh_config, hosts.known_hosts, names, (names,))
        wall, per, failures = _raw(hosts, forks, None)
        report.rows.append(_row(ROW_RAW_COLD, wall, per, failures))
        anyio.run(_gateway_rows, hosts, forks, work, report, backend="asyncio")
        with _raw_masters(hosts, forks, work / "m") as masters:
            wall, per, failures = _raw(hosts, forks, masters)
            report.rows.append(_row(ROW_RAW_WARM, wall, per, failures))
    report.load_after = os.getloadavg()
    report.aims = _aims(report)
    return report


def render_markdown(report: Report) -> str:
    lines = [
        f"{report.targets} targets (aliases of {report.sshds} loopback sshds), forks {report.forks}; load "
        f"{' '.join(f'{x:.2f}' for x in report.load_before)} before, "
        f"{' '.join(f'{x:.2f}' for x in report.load_after or ())} after.",
        "",
        "| subject | targets | wall s | p50 ms | p95 ms | failures | peak RSS MB | peak fds | masters open "
        "| agents up |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report.rows:
        extra = [
            "" if row.peak_rss_mb is None else f"{row.peak_rss_mb:.1f}",
            "" if row.peak_fds is None else str(row.peak_fds),
            "" if row.masters_open is None else str(row.masters_open),
            "" if row.agents_up is None else str(row.agents_up),
        ]
        lines.append(
            f"| {row.subject} | {row.targets} | {row.wall_s:.2f} | {row.p50_ms:.1f} | {row.p95_ms:.1f} | "
            f"{row.failures} | {' | '.join(extra)} |"
        )
    lines += ["", "| aim | target | measured | met |", "|---|---|---|---|"]
    lines += [f"| {a.what} | {a.target} | {a.measured} | {'yes' if a.met else 'no'} |" for a in report.aims]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acceptance.bench_fleet", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--targets", type=int, default=200, help="targets (default 200)")
    parser.add_argument("--sshds", type=int, default=4, help="throwaway sshds the targets are spread over")
    parser.add_argument("--forks", type=int, default=32, help="targets in flight (default 32)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    parser.add_argument("--json-out", type=Path, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    if args.targets < 1 or args.sshds < 1 or args.forks < 1:
        parser.error("--targets, --sshds and --forks must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="rogbf-", dir="/tmp"))  # short: ControlPath < 108 bytes
    try:
        os.chmod(work, 0o700)
        report = _measure(args.targets, args.sshds, args.forks, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data = asdict(report)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(data, indent=2), encoding="utf-8")
    print(json.dumps(data, indent=2) if args.json else render_markdown(report))
    return 1 if any(row.failures for row in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
