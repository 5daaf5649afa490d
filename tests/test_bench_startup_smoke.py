"""Smoke test of the start-up benchmark: it spawns the gateway, gets its ``initialize`` answer over stdio and
prints its rows (timings are not judged here; the README's figure comes from a full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_startup

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,  # a handful of interpreter start-ups, ~1 s each
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
]


def test_bench_startup_runs_and_prints_its_rows_with_the_upstream_rows_and_the_overlap_ratio(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rows.json"
    argv = [
        *(sys.executable, "-m", "acceptance.bench_startup", "--runs", "1", "--no-peer", "--no-warmup"),
        *("--json-out", str(out)),
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "| subject | median ms | p95 ms | min ms | CPU ms (median) |" in done.stdout
    upstream_rows = (
        bench_startup.ROW_TOOLS_GATEWAY,
        bench_startup.ROW_TOOLS_UPSTREAM,
        bench_startup.ROW_TOOLS_BOTH,
        bench_startup.ROW_TOOLS_SEQUENTIAL,
    )
    for row in (
        bench_startup.ROW_GATEWAY,
        bench_startup.ROW_IMPORTS,
        bench_startup.ROW_FLOOR,
        *upstream_rows,
    ):
        assert f"| {row} |" in done.stdout, done.stdout
    assert f"| {bench_startup.ROW_PEER} |" not in done.stdout
    assert "gateway + upstream over the slower alone (median): " in done.stdout
    rows = json.loads(out.read_text())
    assert set(upstream_rows) <= set(rows)
    assert bench_startup.overlap_ratio(rows) is not None


def test_bench_startup_json_has_one_sample_per_run() -> None:
    argv = [
        sys.executable,
        "-m",
        "acceptance.bench_startup",
        "--runs",
        "2",
        "--no-peer",
        "--no-upstream",
        "--no-warmup",
        "--json",
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(done.stdout)
    assert set(rows) == {bench_startup.ROW_GATEWAY, bench_startup.ROW_IMPORTS, bench_startup.ROW_FLOOR}
    for row in rows.values():
        assert row["runs"] == 2
        assert row["median_ms"] > 0
        assert row["cpu_median_ms"] > 0
