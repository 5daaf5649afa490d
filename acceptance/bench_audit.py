"""Audit benchmark: the cost of the tamper-evident chain, of ``audit verify``, and of output scrubbing.

Run from the repository root::

    .venv/bin/python -m acceptance.bench_audit [--records 20000] [--rounds 3] [--verify 200000]
        [--json] [--json-out FILE]

Rows (in a temporary directory, removed at the end):

* ``write, chain off`` / ``write, chain on`` — the whole audit path a tool call pays: ``AuditLog.tool_call``
  renders and redacts the record on the event loop, the writer thread appends it (and seals it, when
  chained: sequence number, HMAC-SHA256 over the previous MAC and the line, the head after each batch),
  in bursts of 10,000 records each waited for with ``flush``. Rounds are interleaved (off, on, off, on …)
  so load from other processes hits both alike; the table gives the median and the best round, and the
  ratio of the medians (the issue's bar: chained within 10 % of unchained);
* ``writer only, chain off`` / ``on`` — the writer thread's part alone (already rendered lines appended in
  batches of 512), in µs per record: what sealing adds where it happens;
* ``audit verify`` — :func:`gateway.audit.verify.verify_files` over a chained log of ``--verify`` records
  (and its head), in records per second of wall and of CPU time (the issue's bar: ≥ 100k records/s);
* ``scrub …`` — :meth:`gateway._redact.Redactor.scrub` (``[redaction] output = "mask"``) over command
  output of several sizes and shapes: ordinary log lines, the same with planted keys, and a dense
  adversarial text (``key=`` on every word), in MiB/s; the scan is linear, so a result's cost is bounded
  by its size (``output_cap_bytes``, 64 KiB per stream by default).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from gateway._redact import Redactor
from gateway.audit.chain import Chain, HeadFile
from gateway.audit.log import AuditLog, _AuditFile
from gateway.audit.verify import verify_files

__all__ = ["main", "run"]

BURST = 10_000
_FLUSH_S = 120.0
_KEY = bytes(range(32))

ROW_OFF = "write, chain off"
ROW_ON = "write, chain on"
ROW_WRITER_OFF = "writer only, chain off"
ROW_WRITER_ON = "writer only, chain on"
ROW_VERIFY = "audit verify"

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    + "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n" * 6
    + "-----END OPENSSH PRIVATE KEY-----\n"
)
_LOG_LINE = "2026-12-02T13:00:00.000Z app[1234]: GET /api/v1/items?page=3 200 12ms user=alice bytes=5120\n"


def _record(log: AuditLog, i: int) -> None:
    log.tool_call(
        request_id=str(i),
        principal="bench",
        tool="remote_exec",
        toolset="execute",
        target="web1",
        outcome="ok",
        error_code=None,
        duration_ms=12.5,
        arguments={"target": "web1", "argv": ["uname", "-a"], "note": "y" * 200},
    )


async def _write_round(work: Path, chained: bool, records: int, index: int) -> tuple[float, float]:
    """(records per second of wall time, CPU µs of the whole process per record)."""
    log = AuditLog(
        work / f"audit-{chained}-{index}.jsonl",
        max_bytes=1 << 30,
        backups=1,
        redactor=Redactor(),
        key_file=work / "bench.key" if chained else None,
        head_file=work / f"bench-{index}.head" if chained else None,
    )
    async with log:
        started, cpu = time.perf_counter(), time.process_time()
        done = 0
        while done < records:
            burst = min(BURST, records - done)
            for i in range(done, done + burst):
                _record(log, i)
            with anyio.fail_after(_FLUSH_S):
                await log.flush()
            done += burst
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    status = log.status()
    if status["records_written"] != records:
        raise RuntimeError(f"wrote {status['records_written']} of {records} records: {status}")
    return records / elapsed, cpu / records * 1e6


def _writer_round(work: Path, chained: bool, records: int, index: int) -> float:
    """µs per record of the writer thread's work alone."""
    audit = _AuditFile(work / f"writer-{chained}-{index}.jsonl", 1 << 30, 1)
    if chained:
        audit.chain = Chain(_KEY, HeadFile(work / f"writer-{index}.head", _KEY))
    line = json.dumps(
        {
            "event": "tool_call",
            "tool": "remote_exec",
            "arguments": {"argv": ["uname", "-a"]},
            "note": "y" * 200,
        }
    )
    batch = [line] * 512
    started = time.perf_counter()
    written = 0
    while written < records:
        outcome, _ = audit.append(batch)
        if outcome.error is not None:
            raise RuntimeError(outcome.error)
        written += len(batch)
    return (time.perf_counter() - started) / written * 1e6


def _verify_rate(work: Path, records: int) -> dict[str, float]:
    audit = _AuditFile(work / "verify.jsonl", 1 << 30, 1)
    audit.chain = Chain(_KEY, HeadFile(work / "verify.head", _KEY))
    line = json.dumps(
        {"event": "tool_call", "tool": "remote_exec", "arguments": {"argv": ["uname"]}, "x": "y" * 200}
    )
    for start in range(0, records, 1000):
        audit.append([line] * min(1000, records - start))
    wall, cpu = time.perf_counter(), time.process_time()
    report = verify_files(work / "verify.jsonl", _KEY, head_file=work / "verify.head")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if report.problem is not None or report.records != records:
        raise RuntimeError(f"verify found {report.problem} over {report.records} records")
    return {"records": records, "wall_per_s": records / wall, "cpu_per_s": records / max(cpu, 1e-9)}


def _texts() -> dict[str, str]:
    ordinary_1m = _LOG_LINE * ((1 << 20) // len(_LOG_LINE))
    planted = ordinary_1m[: len(ordinary_1m) // 2] + PEM + "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"
    planted += ordinary_1m[len(ordinary_1m) // 2 :]
    dense = "key=v " * ((1 << 20) // 6)
    return {
        "scrub 64 KiB log lines (no secret)": ordinary_1m[: 64 * 1024],
        "scrub 1 MiB log lines (no secret)": ordinary_1m,
        "scrub 1 MiB log lines + PEM + AWS key": planted,
        "scrub 16 MiB log lines (no secret)": ordinary_1m * 16,
        "scrub 1 MiB dense key=v (adversarial)": dense,
    }


def _scrub_rows(rounds: int) -> dict[str, dict[str, Any]]:
    redactor = Redactor([os.urandom(32).hex()])  # a known secret, as the gateway has (its audit key)
    rows: dict[str, dict[str, Any]] = {}
    for name, text in _texts().items():
        times = []
        found: dict[str, int] = {}
        for _ in range(max(1, rounds)):
            started = time.perf_counter()
            _, found = redactor.scrub(text)
            times.append(time.perf_counter() - started)
        best = min(times)
        rows[name] = {
            "bytes": len(text.encode()),
            "ms_best": best * 1e3,
            "mib_per_s": len(text.encode()) / (1 << 20) / best,
            "masked": sum(found.values()),
        }
    return rows


def run(records: int, rounds: int, verify: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="rog-bench-audit-"))
    try:
        rates: dict[bool, list[float]] = {False: [], True: []}
        cpus: dict[bool, list[float]] = {False: [], True: []}
        writer: dict[bool, list[float]] = {False: [], True: []}
        for index in range(rounds):
            for chained in (False, True) if index % 2 == 0 else (True, False):
                rate, cpu = anyio.run(_write_round, work, chained, records, index)
                rates[chained].append(rate)
                cpus[chained].append(cpu)
                writer[chained].append(_writer_round(work, chained, records, index))
            for path in work.glob("*.jsonl"):  # keep the disk use of a long run flat
                path.unlink()
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        result: dict[str, Any] = {
            "write": {
                ROW_OFF: {
                    "median_per_s": off,
                    "best_per_s": max(rates[False]),
                    "cpu_us_median": statistics.median(cpus[False]),
                    "rounds": rates[False],
                },
                ROW_ON: {
                    "median_per_s": on,
                    "best_per_s": max(rates[True]),
                    "cpu_us_median": statistics.median(cpus[True]),
                    "rounds": rates[True],
                },
                "chain_on_over_off": on / off,
                "chain_on_over_off_best": max(rates[True]) / max(rates[False]),
                "cpu_on_over_off": statistics.median(cpus[True]) / statistics.median(cpus[False]),
            },
            "writer": {
                ROW_WRITER_OFF: {"median_us": statistics.median(writer[False])},
                ROW_WRITER_ON: {"median_us": statistics.median(writer[True])},
            },
            "verify": _verify_rate(work, verify),
            "scrub": _scrub_rows(rounds),
            "records_per_round": records,
            "rounds": rounds,
        }
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=20_000, help="records per write round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per row")
    parser.add_argument("--verify", type=int, default=200_000, help="records in the log verified")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    result = run(args.records, args.rounds, args.verify)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    write, writer, verify = result["write"], result["writer"], result["verify"]
    print(
        f"audit write: {args.records} records per round, {args.rounds} interleaved rounds, bursts of {BURST}"
    )
    print("| row | median records/s | best records/s | CPU µs/record (median) |")
    print("|---|---:|---:|---:|")
    for row in (ROW_OFF, ROW_ON):
        w = write[row]
        print(f"| {row} | {w['median_per_s']:.0f} | {w['best_per_s']:.0f} | {w['cpu_us_median']:.1f} |")
    print(
        f"| chain on / off | {write['chain_on_over_off']:.3f} | {write['chain_on_over_off_best']:.3f} "
        f"| {write['cpu_on_over_off']:.3f} |"
    )
    print()
    print("| row | median µs/record |")
    print("|---|---:|")
    for row in (ROW_WRITER_OFF, ROW_WRITER_ON):
        print(f"| {row} | {writer[row]['median_us']:.2f} |")
    print()
    print("| row | records | records/s (wall) | records/s (CPU) |")
    print("|---|---:|---:|---:|")
    print(f"| {ROW_VERIFY} | {verify['records']} | {verify['wall_per_s']:.0f} | {verify['cpu_per_s']:.0f} |")
    print()
    print("| output scrubbing | bytes | best ms | MiB/s | masked |")
    print("|---|---:|---:|---:|---:|")
    for name, row in result["scrub"].items():
        print(
            f"| {name} | {row['bytes']} | {row['ms_best']:.1f} | {row['mib_per_s']:.1f} | {row['masked']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
