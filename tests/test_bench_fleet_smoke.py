"""Smoke test of the fleet benchmark: a small count runs end to end, prints every row and the aims, writes
its JSON and removes its temporary directory. Timings are not judged here; ``acceptance/bench_fleet.py``
is the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_fleet
from tests.fixtures.sshd import sshd_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
    pytest.mark.skipif(sshd_unavailable_reason() is not None, reason=str(sshd_unavailable_reason())),
]


def test_the_fleet_benchmark_prints_every_row_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    argv = [sys.executable, "-m", "acceptance.bench_fleet", "--targets", "6", "--sshds", "2", "--forks", "4"]
    done = subprocess.run(
        [*argv, "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    for row in bench_fleet.ROWS:
        assert f"| {row} | 6 |" in done.stdout, done.stdout
    assert "| aim | target | measured | met |" in done.stdout
    report = json.loads(out.read_text())
    assert [row["failures"] for row in report["rows"]] == [0, 0, 0, 0]
    assert report["rows"][1]["masters_open"] == 6
    assert not Path(report["workdir"]).exists()
