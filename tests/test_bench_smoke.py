"""Smoke test of the exec benchmark: it runs end to end, prints its rows and leaves nothing behind.

Timings are not judged here (this is not a timed test); ``acceptance/bench_exec.py`` is the benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_exec
from tests.fixtures.procs import lingering_processes
from tests.fixtures.sshd import sshd_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
    pytest.mark.skipif(sshd_unavailable_reason() is not None, reason=str(sshd_unavailable_reason())),
]


def _run(*extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "acceptance.bench_exec", "--calls", "3", "--warmup", "1", *extra]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_the_exec_benchmark_prints_a_table_with_every_row() -> None:
    done = _run()
    assert done.returncode == 0, done.stderr[-4000:]
    assert "| subject | calls | median ms | p95 ms | ratio to raw | burst wall ms | failures |" in done.stdout
    for row in bench_exec.ROWS:
        assert f"| {row} |" in done.stdout, done.stdout
    assert "Gateway RSS" in done.stdout
    assert "| aim | target | measured | met |" in done.stdout


def test_the_exec_benchmark_json_reports_every_row_and_cleans_up() -> None:
    done = _run("--json")
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert [row["subject"] for row in report["rows"]] == list(bench_exec.ROWS)
    calls = {row["subject"]: row["calls"] for row in report["rows"]}
    assert {calls[name] for name in bench_exec.SERIAL_ROWS} == {3}
    assert calls[bench_exec.ROW_COLD_AGENT] == bench_exec.COLD
    assert calls[bench_exec.ROW_GW_AGENT_BURST] == bench_exec.BURST
    assert calls[bench_exec.ROW_GW_AGENT_BIG] == bench_exec.BIG_BURST
    assert all(row["failures"] == 0 for row in report["rows"])
    assert {aim["what"] for aim in report["aims"]} >= {"gateway idle RSS"}
    work = report["workdir"]
    assert not Path(work).exists()
    assert lingering_processes(work) == []  # masters, gateway: all terminated and reaped
