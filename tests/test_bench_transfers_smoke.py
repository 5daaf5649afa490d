"""Smoke test of the transfer benchmark: it runs end to end at a small size, prints every row (raw and
gateway, for each direction and method) and leaves no process or directory of its own behind.

Throughput is not judged here; ``acceptance/bench_transfers.py`` is the benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_transfers
from tests.fixtures.procs import lingering_processes
from tests.fixtures.sshd import sshd_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
    pytest.mark.skipif(sshd_unavailable_reason() is not None, reason=str(sshd_unavailable_reason())),
]


def _expected_subjects() -> list[str]:
    names = []
    for direction, method, which in bench_transfers.PAIRS:
        what = "" if which == "big" else ", 1 KiB"
        names += [f"raw {method} {direction}{what}", f"gateway remote_{direction} ({method}{what})"]
    return names


def test_the_transfer_benchmark_prints_every_row_at_a_small_size_and_cleans_up() -> None:
    argv = [sys.executable, "-m", "acceptance.bench_transfers", "--size-mib", "1", "--rounds", "1", "--json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    table, _, raw_json = done.stdout.partition("\n{")
    report = json.loads("{" + raw_json)
    assert "| subject | runs | median s | best s | MiB/s (median) | ratio (median) | ratio (best) |" in table
    assert table.startswith("Transfers of 1 MiB, 1 interleaved rounds")
    expected = _expected_subjects()
    assert [row["subject"] for row in report["rows"]] == expected
    for row in report["rows"]:
        assert f"| {row['subject']} | 1 |" in table, table
        assert row["runs"] == 1
        assert row["median_s"] > 0
        if row["subject"].startswith("gateway"):
            assert row["ratio"] is not None
    assert (report["size_mib"], report["scaled_down"]) == (1, False)
    assert not Path(report["workdir"]).exists()
    assert lingering_processes(report["workdir"]) == []
