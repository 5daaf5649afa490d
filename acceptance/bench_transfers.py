"""Transfer benchmark: ``remote_upload`` / ``remote_download`` through the gateway vs raw rsync and scp over
the very same ControlMaster, in one run.

Run from the repository root, as root (the sshd fixture creates users)::

    .venv/bin/python -m acceptance.bench_transfers [--size-mib 512] [--rounds 3] [--json]

One throwaway sshd (``tests.fixtures.sshd.start_sshd``), one gateway subprocess over streamable HTTP with a
local root in a temporary directory on local disk (``/tmp``), target user ``ro-plain``. The raw subjects
use the gateway's own master (its socket in the gateway's control directory), so both sides share one SSH
connection; the raw commands are what an operator would type (``rsync -t SRC host:DST``,
``scp -o ControlPath=... SRC host:DST``). Every subject copies a fresh destination (removed before each
copy, partial data included, and dirty pages are flushed before each timed copy); subjects are interleaved
per round, raw and gateway taking turns to go first, so drift hits all alike. Gateway times
are whole MCP calls (path probes, capability check, the copy, the result). Throughput = size / time;
ratio = raw median time / gateway median time (1.00x = as fast as raw, higher is better).

When the disk has less than four times the size free, the size is scaled down and the report says so.
Every process started is terminated and reaped; the temporary directory is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from acceptance.harness.gateway_proc import run_gateway
from acceptance.harness.sshd import SshdInstance, start_sshd

__all__ = ["main"]

TARGET = "plain"
MIB = 1024 * 1024
_CHUNK = 8 * MIB
_CALL_S = 600.0

PAIRS = (
    ("upload", "rsync", "big"),
    ("download", "rsync", "big"),
    ("upload", "scp", "big"),
    ("download", "scp", "big"),
    ("upload", "rsync", "small"),  # 1 KiB: the fixed cost of a call (probes, MCP round trip), not throughput
    ("download", "rsync", "small"),
)
SMALL = 1024


Subject = tuple[Path, Callable[[], Awaitable[None]]]  # (destination to clear, the timed call)


@dataclass
class Row:
    subject: str
    runs: int
    median_s: float
    best_s: float
    mib_s: float  # at the median
    ratio: float | None = None  # raw median time / this median time (gateway rows)
    best_ratio: float | None = None  # raw best time / this best time (least disturbed by other load)


@dataclass
class Report:
    size_mib: int
    requested_mib: int
    rounds: int
    scaled_down: bool
    workdir: str
    rows: list[Row] = field(default_factory=list)


def _write_random(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        left = size
        while left:
            block = os.urandom(min(_CHUNK, left))
            fh.write(block)
            left -= len(block)


def _clean(*paths: Path) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        partial = path.parent / ".rog-partial"
        if partial.exists():
            shutil.rmtree(partial)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=_CALL_S)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")


def _master_socket(control_dir: Path) -> Path:
    sockets = [p for p in control_dir.iterdir() if p.is_socket()]
    if len(sockets) != 1:
        raise RuntimeError(f"expected one gateway master socket in {control_dir}, found {len(sockets)}")
    return sockets[0]


async def _measure(sshd: SshdInstance, work: Path, size: int, rounds: int) -> list[Row]:
    local_root = work / "local"
    remote = work / "remote"  # the target is this machine; its user writes here
    local_root.mkdir()
    remote.mkdir()
    remote.chmod(0o777)
    big_local = local_root / "payload.bin"
    big_remote = remote / "payload.bin"
    _write_random(big_local, size)
    shutil.copyfile(big_local, big_remote)
    big_remote.chmod(0o644)
    small_local, small_remote = local_root / "small.bin", remote / "small.bin"
    _write_random(small_local, SMALL)
    shutil.copyfile(small_local, small_remote)
    small_remote.chmod(0o644)
    control_dir = work / "gwc"
    gw_dir = work / "gw"
    gw_dir.mkdir()
    config: dict[str, Any] = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(control_dir)},
        "targets": [{"name": TARGET, "host": sshd.alias(TARGET)}],
        "transfers": {"local_roots": [str(local_root)]},
    }
    host = sshd.alias(TARGET)
    cfg = str(sshd.ssh_config)
    times: dict[str, list[float]] = {}
    with run_gateway(gw_dir, config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(_CALL_S))
        async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:

            async def tool(name: str, args: dict[str, Any]) -> None:
                result = await client.call_tool(name, args)
                if result.is_error:
                    raise RuntimeError(f"{name} failed: {result.content}")

            # warm-up: the master, the capability cache, the page cache
            await tool("target_capabilities", {"target": TARGET})
            sock = str(_master_socket(control_dir))
            rsh = f"ssh -F {cfg} -S {sock} -o ControlMaster=no"
            scp = ["scp", "-F", cfg, "-o", f"ControlPath={sock}", "-o", "ControlMaster=no", "-q"]
            up_dst, down_dst = remote / "up.bin", local_root / "down.bin"

            def subjects(direction: str, method: str, which: str) -> dict[str, Subject]:
                src_local, src_remote = (
                    (big_local, big_remote) if which == "big" else (small_local, small_remote)
                )
                dst = up_dst if direction == "upload" else down_dst
                src_arg = str(src_local) if direction == "upload" else f"{host}:{src_remote}"
                dst_arg = f"{host}:{up_dst}" if direction == "upload" else str(down_dst)
                raw_argv = (
                    ["rsync", "-t", "-e", rsh, src_arg, dst_arg]
                    if method == "rsync"
                    else [*scp, src_arg, dst_arg]
                )
                args = {
                    "target": TARGET,
                    "local_path": str(src_local if direction == "upload" else down_dst),
                    "remote_path": str(up_dst if direction == "upload" else src_remote),
                    "method": method,
                }

                async def raw() -> None:
                    await anyio.to_thread.run_sync(_run, raw_argv)

                async def gateway() -> None:
                    await tool(f"remote_{direction}", args)

                return {
                    _name("raw", direction, method, which): (dst, raw),
                    _name("gw", direction, method, which): (dst, gateway),
                }

            async def timed(dst: Path, call: Callable[[], Awaitable[None]]) -> float:
                """Remove the destination and flush every dirty page first (untimed): no subject pays for
                the write-back of the one before it."""
                _clean(dst)
                await anyio.to_thread.run_sync(os.sync)
                started = time.perf_counter()
                await call()
                return time.perf_counter() - started

            pairs = [list(subjects(*pair).items()) for pair in PAIRS]
            for pair in pairs:  # one untimed pass of each
                for _, (dst, call) in pair:
                    await timed(dst, call)
            for index in range(rounds):
                for pair in pairs:
                    for name, (dst, call) in (
                        pair if index % 2 == 0 else reversed(pair)
                    ):  # alternate who leads
                        times.setdefault(name, []).append(await timed(dst, call))
            _clean(up_dst, down_dst)
    rows: list[Row] = []
    for direction, method, which in PAIRS:
        raw_name, gw_name = _name("raw", direction, method, which), _name("gw", direction, method, which)
        raw_med, gw_med = statistics.median(times[raw_name]), statistics.median(times[gw_name])
        raw_best, gw_best = min(times[raw_name]), min(times[gw_name])
        moved = size if which == "big" else SMALL
        rows.append(
            Row(raw_name, rounds, round(raw_med, 3), round(raw_best, 3), round(moved / MIB / raw_med, 1))
        )
        rows.append(
            Row(
                gw_name,
                rounds,
                round(gw_med, 3),
                round(gw_best, 3),
                round(moved / MIB / gw_med, 1),
                round(raw_med / gw_med, 2),
                round(raw_best / gw_best, 2),
            )
        )
    return rows


def _name(who: str, direction: str, method: str, which: str) -> str:
    what = "" if which == "big" else ", 1 KiB"
    if who == "raw":
        return f"raw {method} {direction}{what}"
    return f"gateway remote_{direction} ({method}{what})"


def render_markdown(report: Report) -> str:
    scaled = (
        f" (scaled down from {report.requested_mib} MiB: not enough free disk)" if report.scaled_down else ""
    )
    lines = [
        f"Transfers of {report.size_mib} MiB{scaled}, {report.rounds} interleaved rounds per subject, "
        "raw tools over the gateway's own master; ratio = raw time / gateway time.",
        "",
        "| subject | runs | median s | best s | MiB/s (median) | ratio (median) | ratio (best) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report.rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        best = "" if row.best_ratio is None else f"{row.best_ratio:.2f}x"
        lines.append(
            f"| {row.subject} | {row.runs} | {row.median_s:.3f} | {row.best_s:.3f} | {row.mib_s:.1f} | "
            f"{ratio} | {best} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the report as JSON as well")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rogbt-", dir="/tmp"))
    work.chmod(0o711)  # the target user must reach remote/ (traverse, not list)
    try:
        free_mib = shutil.disk_usage(work).free // MIB
        size_mib = min(args.size_mib, max(1, free_mib // 4 - 64))  # source twice, two destinations
        report = Report(size_mib, args.size_mib, args.rounds, size_mib < args.size_mib, str(work))
        with start_sshd() as sshd:
            report.rows = anyio.run(_measure, sshd, work, size_mib * MIB, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(render_markdown(report))
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
