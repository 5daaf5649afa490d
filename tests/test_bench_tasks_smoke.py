"""Smoke test of the task benchmark: it runs end to end, prints every row and leaves no task process behind.

Timings are not judged here; ``acceptance/bench_tasks.py`` is the benchmark.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_tasks
from tests.fixtures.procs import lingering_processes
from tests.fixtures.sshd import sshd_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
    pytest.mark.skipif(sshd_unavailable_reason() is not None, reason=str(sshd_unavailable_reason())),
]


def test_the_task_benchmark_prints_every_row_and_cleans_up() -> None:
    argv = [sys.executable, "-m", "acceptance.bench_tasks", "--tasks", "3"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "| subject | calls | median ms | p95 ms | max ms | failures |" in done.stdout
    for row in bench_tasks.ROWS:
        assert f"| {row} | 3 |" in done.stdout, done.stdout
    assert "3 live tasks" in done.stdout
    # this run's tasks only: other tests (other xdist workers, other runs) have task processes of their own
    [marks] = [
        line.removeprefix("task markers: ") for line in done.stderr.splitlines() if "task markers: " in line
    ]
    assert len(marks.split()) >= 3, done.stderr[-4000:]
    for mark in marks.split():
        assert lingering_processes(mark, environ=True) == []
