"""File-tool benchmark: ``remote_read`` / ``remote_write`` / ``remote_stat`` through the gateway over MCP/HTTP
vs raw ``ssh -S master target cat``, ``'cat > f'`` and ``stat`` over the very same ControlMaster, in one run.

Run from the repository root, as root (the sshd fixture creates users)::

    .venv/bin/python -m acceptance.bench_files [--rounds 15] [--stats 100] [--json] [--json-out FILE]

One throwaway sshd (``tests.fixtures.sshd.start_sshd``), one gateway subprocess over streamable HTTP, target
user ``ro-plain`` (carrier ``auto``: the file tools ride the target's agent). The gateway is configured with
caps raised to carry the sizes (``server.max_argument_bytes`` 2 MiB, ``server.max_body_bytes`` 4 MiB,
``transport.output_cap_bytes`` 8 MiB, as an operator would for such files). Reads: 64 KiB (the default read
cap), 1 MiB and 8 MiB; a read's content is the result's second text block (carried once, not also in
``structuredContent``). Writes: 1 MiB and the largest payload the DEFAULT caps allow (64 KiB of arguments:
the content less the JSON envelope). Contents are ASCII text (``utf-8``
encoding, what agents edit); every write is a fresh random payload and every write is checked by the SHA-256
the tool returns, every read by the bytes returned.

The raw subjects use the gateway's own master socket (``ssh -F CFG -S SOCK -o ControlMaster=no``), so both
sides share one SSH connection; they are what an operator would type. Subjects are interleaved per round, raw
and gateway taking turns to go first, so drift hits all alike. Ratio = gateway median / raw median (lower is
better; 0.50x = twice as fast as raw). The stat row times ``--stats`` sequential calls as one figure per
round, next to the same number of ``gateway_health`` calls (the MCP/HTTP floor of this client and server,
no ssh at all). The aims (reads <= 1.5x raw, writes <= 1.2x raw, stat <= 0.5x raw) are printed, not
asserted: this machine is shared and noisy.

Every process started is terminated and reaped; the temporary directory is removed.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from acceptance._timing import interleaved
from acceptance.harness.gateway_proc import run_gateway
from acceptance.harness.sshd import SshdInstance, start_sshd

__all__ = ["main"]

TARGET = "plain"
MIB = 1024 * 1024
BIG = MIB
DEFAULT_ARGUMENT_CAP = 64 * 1024
DEFAULT_READ_CAP = 64 * 1024
_ENVELOPE = 512  # JSON-RPC + arguments around the content, generously: the largest content that still fits
_CALL_S = 120.0
AIM_RW = 1.2
AIM_READ = 1.5
READ_SIZES = {"64 KiB": DEFAULT_READ_CAP, "1 MiB": MIB, "8 MiB": 8 * MIB}
FLOOR = "gateway gateway_health x{n} (MCP/HTTP floor, no ssh)"
AIM_STAT = 0.5


@dataclass
class Row:
    subject: str
    runs: int
    median_ms: float
    best_ms: float
    ratio: float | None = None  # gateway median / raw median
    aim: float | None = None


@dataclass
class Report:
    rounds: int
    stats: int
    sizes: dict[str, int]
    rows: list[Row] = field(default_factory=list)


def _text(size: int) -> str:
    rng = random.SystemRandom()
    return "".join(rng.choices(string.ascii_letters + string.digits + "\n", k=size))


def _ssh(argv: list[str], stdin: bytes | None = None) -> bytes:
    done = subprocess.run(argv, input=stdin, capture_output=True, check=False, timeout=_CALL_S)
    if done.returncode != 0:
        raise RuntimeError(f"raw ssh failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return done.stdout


def _master_socket(control_dir: Path) -> Path:
    sockets = [p for p in control_dir.iterdir() if p.is_socket()]
    if len(sockets) != 1:
        raise RuntimeError(f"expected one gateway master socket in {control_dir}, found {len(sockets)}")
    return sockets[0]


Timed = Callable[[], Awaitable[None]]


async def _measure(
    sshd: SshdInstance, work: Path, rounds: int, stats: int
) -> tuple[list[Row], dict[str, int]]:
    remote = work / "remote"  # the target is this machine; its user writes here
    remote.mkdir()
    remote.chmod(0o777)
    write_sizes = {"1 MiB": BIG, "default caps": DEFAULT_ARGUMENT_CAP - _ENVELOPE}
    sources: dict[str, str] = {}
    for label, size in READ_SIZES.items():
        path = remote / f"read-{size}.txt"
        sources[label] = _text(size)
        path.write_text(sources[label])
        path.chmod(0o644)
    # fresh content for every write, generated before the clock runs (random text is slow to make)
    payloads = {
        label: itertools.cycle([_text(size) for _ in range(8)]) for label, size in write_sizes.items()
    }
    control_dir = work / "gwc"
    gw_dir = work / "gw"
    gw_dir.mkdir()
    config: dict[str, Any] = {
        "server": {"max_argument_bytes": 2 * MIB, "max_body_bytes": 4 * MIB},
        "transport": {
            "ssh_config_file": str(sshd.ssh_config),
            "control_dir": str(control_dir),
            "output_cap_bytes": max(READ_SIZES.values()),
        },
        "targets": [{"name": TARGET, "host": sshd.alias(TARGET)}],
    }
    host = sshd.alias(TARGET)
    times: dict[str, list[float]] = {}
    with run_gateway(gw_dir, config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(_CALL_S))
        # A 1 MiB read's answer is over the Python SDK's default 1 MiB SSE event limit (the JSON around the
        # content): this client lifts it (docs/tools.md: output caps).
        transport = streamable_http_client(gw.url, http_client=http, max_sse_event_size=None)
        async with http, Client(transport, mode="legacy") as client:

            async def tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
                """The structured content, plus ``carried``: a second text block's text (a read's content)."""
                result = await client.call_tool(name, args)
                if result.is_error or result.structured_content is None:
                    raise RuntimeError(f"{name} failed: {str(result.content)[:2000]}")
                content: dict[str, Any] = result.structured_content
                if len(result.content) > 1 and isinstance(result.content[1], types.TextContent):
                    return {**content, "carried": result.content[1].text}
                return content

            await tool("remote_stat", {"target": TARGET, "path": str(remote)})  # master + agent up
            sock = str(_master_socket(control_dir))
            ssh = ["ssh", "-F", str(sshd.ssh_config), "-S", sock, "-o", "ControlMaster=no", host]

            def pair(kind: str, label: str) -> dict[str, Timed]:
                size = (READ_SIZES if kind == "read" else write_sizes)[label]
                src = remote / f"read-{size}.txt"
                dst = remote / f"write-{size}.txt"
                if kind == "read":

                    async def raw() -> None:
                        out = await anyio.to_thread.run_sync(_ssh, [*ssh, "cat", str(src)])
                        _expect(out == sources[label].encode(), "raw cat returned other bytes")

                    async def gateway() -> None:
                        got = await tool("remote_read", {"target": TARGET, "path": str(src)})
                        _expect(got.get("carried") == sources[label], "remote_read returned other text")
                        _expect("content" not in got, "remote_read carried the content twice")
                        _expect(not got["truncated"], "remote_read truncated under the raised cap")

                else:

                    async def raw() -> None:
                        data = next(payloads[label]).encode()
                        await anyio.to_thread.run_sync(_ssh, [*ssh, f"cat > {dst}"], data)

                    async def gateway() -> None:
                        data = next(payloads[label])
                        args = {"target": TARGET, "path": str(dst), "content": data}
                        got = await tool("remote_write", args)
                        digest = hashlib.sha256(data.encode()).hexdigest()
                        _expect(got["sha256"] == digest, "remote_write reported another SHA-256")

                return {
                    f"raw ssh {_raw_verb(kind)}, {label}": raw,
                    f"gateway remote_{kind}, {label}": gateway,
                }

            async def raw_stats() -> None:
                for _ in range(stats):
                    await anyio.to_thread.run_sync(_ssh, [*ssh, "stat", str(remote)])

            async def gateway_stats() -> None:
                for _ in range(stats):
                    await tool("remote_stat", {"target": TARGET, "path": str(remote)})

            async def floor() -> None:
                for _ in range(stats):
                    await tool("gateway_health", {})

            groups = [pair("read", label) for label in READ_SIZES]
            groups += [pair("write", label) for label in write_sizes]
            groups.append(
                {f"raw ssh stat x{stats}": raw_stats, f"gateway remote_stat x{stats}": gateway_stats}
            )
            groups.append({FLOOR.format(n=stats): floor})
            for group in groups:  # one untimed pass of each
                for call in group.values():
                    await call()
            for index in range(rounds):  # round by round across the groups; in a group, leads alternate
                for group in groups:
                    ordered = group if index % 2 == 0 else dict(reversed(group.items()))
                    for name, samples in (await interleaved(ordered, 1)).items():
                        times.setdefault(name, []).extend(samples)
    rows: list[Row] = []
    for group in groups:
        if len(group) == 1:  # the floor: what any MCP/HTTP call costs here, no ssh at all
            [name] = group
            rows.append(Row(name, rounds, _ms(statistics.median(times[name])), _ms(min(times[name]))))
            continue
        raw_name, gw_name = list(group)
        raw_med = statistics.median(times[raw_name])
        gw_med = statistics.median(times[gw_name])
        aim = AIM_STAT if "stat" in gw_name else AIM_READ if "read" in gw_name else AIM_RW
        rows.append(Row(raw_name, rounds, _ms(raw_med), _ms(min(times[raw_name]))))
        rows.append(
            Row(gw_name, rounds, _ms(gw_med), _ms(min(times[gw_name])), round(gw_med / raw_med, 2), aim)
        )
    return rows, {
        **{f"read {k}": v for k, v in READ_SIZES.items()},
        **{f"write {k}": v for k, v in write_sizes.items()},
    }


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(what)


def _raw_verb(kind: str) -> str:
    return "cat" if kind == "read" else "'cat > f'"


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def render_markdown(report: Report) -> str:
    sizes = ", ".join(f"{label} = {size} bytes" for label, size in report.sizes.items())
    lines = [
        f"File tools vs raw ssh over the gateway's own master, {report.rounds} interleaved rounds ({sizes}); "
        "ratio = gateway median / raw median (lower is better).",
        "",
        "| subject | runs | median ms | best ms | ratio | aim | met |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report.rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        aim = "" if row.aim is None else f"<= {row.aim:.1f}x"
        met = "" if row.ratio is None or row.aim is None else ("yes" if row.ratio <= row.aim else "NO")
        figures = f"{row.median_ms:.2f} | {row.best_ms:.2f}"
        lines.append(f"| {row.subject} | {row.runs} | {figures} | {ratio} | {aim} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--stats", type=int, default=100, help="remote_stat calls per timed stat figure")
    parser.add_argument("--json", action="store_true", help="print the report as JSON as well")
    parser.add_argument("--json-out", type=Path, metavar="FILE", help="also write the report as JSON to FILE")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rogbf-", dir="/tmp"))
    work.chmod(0o711)  # the target user must reach remote/ (traverse, not list)
    try:
        with start_sshd() as sshd:
            rows, sizes = anyio.run(_measure, sshd, work, args.rounds, args.stats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = Report(args.rounds, args.stats, sizes, rows)
    print(render_markdown(report))
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
