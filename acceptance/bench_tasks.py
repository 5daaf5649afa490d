"""Task benchmark: exit-to-``task_wait`` latency, ``task_start`` cost vs ``remote_exec``, 50 live tasks.

Run from the repository root, as root (the sshd fixture creates users)::

    .venv/bin/python -m acceptance.bench_tasks [--tasks N] [--session auto|tmux|setsid] [--json]

One throwaway sshd (``tests.fixtures.sshd.start_sshd``), the real gateway as a subprocess over MCP/HTTP (one
session), on the carrier ``--carrier`` names: ``ssh`` (one ``ssh`` per call over the master, the default) or
``agent`` (every call, the wait's blocking read included, a request on the target's persistent agent):

* **wait latency**: each task sleeps 0.4 s, prints ``date +%s.%N`` and exits; ``task_wait`` is called right
  after ``task_start`` (so it is blocking on the target when the process exits). Latency = the moment the
  wait returned in this process minus the printed exit time (same machine, same clock).
* **start cost**: ``task_start`` of ``true`` vs ``remote_exec`` of ``true``, interleaved.
* **live tasks**: N ``sleep`` tasks at once: gateway RSS before/after, processes of the target user before and
  after (everything a task costs on the target: supervisor, tees, the task, and the shared tmux server), then
  ``task_cancel`` of all of them.

Everything started is cancelled, terminated and reaped; the temporary directories are removed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from acceptance._timing import p95, rss_kb
from acceptance.harness.gateway_proc import run_gateway
from acceptance.harness.sshd import SshdInstance, start_sshd
from acceptance.harness.targets import remote_root, task_markers

__all__ = ["ROWS", "main"]

TARGET = "plain"
ROW_WAIT = "exit → task_wait returns"
ROW_START = "task_start (true)"
ROW_EXEC = "remote_exec (true)"
ROW_CANCEL = "task_cancel (sleep, ends at SIGINT)"
ROWS = (ROW_WAIT, ROW_START, ROW_EXEC, ROW_CANCEL)


@dataclass
class Row:
    subject: str
    calls: int
    median_ms: float
    p95_ms: float
    max_ms: float
    failures: int = 0


@dataclass
class Report:
    tasks: int
    session: str
    carrier: str
    rows: list[Row] = field(default_factory=list)
    gateway_rss_idle_kb: int | None = None
    gateway_rss_live_kb: int | None = None
    target_procs_before: int = 0
    target_procs_live: int = 0
    target_procs_after: int = 0
    live_tasks: int = 0


def _row(subject: str, samples_s: list[float], failures: int = 0) -> Row:
    ms = sorted(s * 1000 for s in samples_s) or [math.nan]
    return Row(
        subject=subject,
        calls=len(samples_s),
        median_ms=round(statistics.median(ms), 2),
        p95_ms=round(p95(ms), 2),
        max_ms=round(ms[-1], 2),
        failures=failures,
    )


def _procs_of(uid: int) -> int:
    """Live processes of ``uid`` (zombies left to a PID 1 that does not reap, as in containers, excluded)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (
                    entry.stat().st_uid == uid
                    and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
                ):
                    count += 1
            except (OSError, IndexError):
                continue
    return count


class _Calls:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def __call__(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(name, arguments)
        if result.is_error:
            detail = getattr(result.content[0], "text", "") if result.content else result
            raise RuntimeError(f"{name} failed: {detail}")
        return dict(result.structured_content or {})


async def _measure(
    sshd: SshdInstance, work: Path, remote: Path, tasks: int, session: str, carrier: str
) -> Report:
    report = Report(tasks=tasks, session=session, carrier=carrier)
    uid = pwd.getpwnam(sshd.users[TARGET]).pw_uid
    gw_dir = work / "gw"
    gw_dir.mkdir()
    config: dict[str, Any] = {
        "transport": {
            "ssh_config_file": str(sshd.ssh_config),
            "control_dir": str(work / "gwc"),
            "carrier": carrier,
        },
        "targets": [{"name": TARGET, "host": sshd.alias(TARGET)}],
        "tasks": {"remote_dir": str(remote), "session": session},
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }
    with run_gateway(gw_dir, config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(120))
        async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
            call = _Calls(client)
            for _ in range(3):  # warm-up: the master, the tmux server
                info = await call("task_start", {"target": TARGET, "argv": ["true"]})
                await call("task_wait", {"task_id": info["id"], "timeout_s": 30})
                await call("remote_exec", {"target": TARGET, "argv": ["true"]})
            report.gateway_rss_idle_kb = rss_kb(gw.proc.pid)

            latencies: list[float] = []
            failures = 0
            for _ in range(tasks):
                info = await call("task_start", {"target": TARGET, "shell": "sleep 0.4; date +%s.%N; exit 0"})
                done = await call("task_wait", {"task_id": info["id"], "timeout_s": 30})
                returned = time.time()
                out = await call("task_output", {"task_id": info["id"]})
                try:
                    ended = float(out["data"].strip())
                except ValueError:
                    failures += 1
                    continue
                if done["outcome"] != "exited":
                    failures += 1
                latencies.append(returned - ended)
            report.rows.append(_row(ROW_WAIT, latencies, failures))

            start_s: list[float] = []
            exec_s: list[float] = []
            quick: list[str] = []
            for _ in range(tasks):
                t0 = time.perf_counter()
                quick.append((await call("task_start", {"target": TARGET, "argv": ["true"]}))["id"])
                start_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await call("remote_exec", {"target": TARGET, "argv": ["true"]})
                exec_s.append(time.perf_counter() - t0)
            report.rows += [_row(ROW_START, start_s), _row(ROW_EXEC, exec_s)]

            for task_id in quick:  # let every earlier task end before counting
                await call("task_wait", {"task_id": task_id, "timeout_s": 30})
            report.target_procs_before = _procs_of(uid)
            live = [
                await call("task_start", {"target": TARGET, "argv": ["sleep", "1000"]}) for _ in range(tasks)
            ]
            states = [await call("task_status", {"task_id": info["id"]}) for info in live]
            report.live_tasks = sum(1 for st in states if st["state"] == "running")
            report.target_procs_live = _procs_of(uid)
            report.gateway_rss_live_kb = rss_kb(gw.proc.pid)
            cancel_s: list[float] = []
            bad = 0
            for info in live:
                t0 = time.perf_counter()
                result = await call("task_cancel", {"task_id": info["id"]})
                cancel_s.append(time.perf_counter() - t0)
                bad += result["step"] not in ("INT", "TERM", "KILL")
            report.rows.append(_row(ROW_CANCEL, cancel_s, bad))
            report.target_procs_after = _procs_of(uid)
    return report


_CARRIERS = {
    "ssh": "ssh carrier (one ssh per call over the master)",
    "agent": "agent carrier (every call a request on the target's persistent agent)",
}


def render_markdown(report: Report) -> str:
    lines = [
        f"Tasks over the {_CARRIERS[report.carrier]}, session {report.session}, "
        f"{report.tasks} tasks per row; gateway over MCP/HTTP.",
        "",
        "| subject | calls | median ms | p95 ms | max ms | failures |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in report.rows:
        lines.append(
            f"| {row.subject} | {row.calls} | {row.median_ms:.2f} | {row.p95_ms:.2f} | {row.max_ms:.2f} | "
            f"{row.failures} |"
        )
    idle, live = report.gateway_rss_idle_kb, report.gateway_rss_live_kb
    per_task = (report.target_procs_live - report.target_procs_before) / max(1, report.live_tasks)
    lines += [
        "",
        f"{report.live_tasks} live tasks: gateway RSS {idle / 1024 if idle else math.nan:.1f} MB idle → "
        f"{live / 1024 if live else math.nan:.1f} MB; processes of the target user "
        f"{report.target_procs_before} → {report.target_procs_live} ({per_task:.1f} per task) → "
        f"{report.target_procs_after} after cancelling them all",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acceptance.bench_tasks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=50, help="tasks per row (default 50)")
    parser.add_argument("--session", default="auto", choices=["auto", "tmux", "setsid"])
    parser.add_argument("--carrier", default="ssh", choices=sorted(_CARRIERS))
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error("--tasks must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="rogbt-", dir="/tmp"))  # short: ControlPath < 108 bytes
    try:
        os.chmod(work, 0o700)
        # remote_root: stops the tmux server and kills anything still carrying a task marker afterwards
        with start_sshd() as sshd, remote_root() as remote:
            report = anyio.run(
                _measure, sshd, work, remote, args.tasks, args.session, args.carrier, backend="asyncio"
            )
            # on stderr, for a caller that checks afterwards that none of this run's tasks lives on (others
            # running on the machine at the same time are not this run's)
            marks = b" ".join(task_markers(remote)).decode()
            print(f"task markers: {marks}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(asdict(report), indent=2) if args.json else render_markdown(report))
    return 1 if any(row.failures for row in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
