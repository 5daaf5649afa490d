"""Smoke test of the exec benchmark: it runs end to end, prints its rows and leaves nothing behind.

Timings are not judged here (this is not a timed test); ``acceptance/bench_exec.py`` is the benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acceptance import bench_exec
from tests.fixtures.procs import lingering_processes
from tests.fixtures.sshd import sshd_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.xdist_group("bench-exec"),  # one worker runs the module's one benchmark run
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
    pytest.mark.skipif(sshd_unavailable_reason() is not None, reason=str(sshd_unavailable_reason())),
]


@pytest.fixture(scope="module")
def bench_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One run of the benchmark for every check here (a run costs ~30 s of a worker): the Markdown table on
    stdout, the same report as JSON in a file, the spaced rows with a short gap."""
    out = tmp_path_factory.mktemp("bench-exec") / "report.json"
    argv = [
        *(sys.executable, "-m", "acceptance.bench_exec", "--calls", "3", "--warmup", "1", "--cold", "1"),
        *("--spaced", "2", "--gap-ms", "5-10", "--json-out", str(out)),
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done, json.loads(out.read_text())


def test_the_exec_benchmark_prints_a_table_with_every_row(
    bench_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    done, _ = bench_run
    assert "| subject | calls | median ms | p95 ms | ratio to raw | burst wall ms | failures |" in done.stdout
    for row in bench_exec.ROWS:
        assert f"| {row} |" in done.stdout, done.stdout
    assert "Gateway RSS" in done.stdout
    assert "| aim | target | measured | met |" in done.stdout


def test_the_exec_benchmark_json_reports_every_row_and_cleans_up(
    bench_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    _, report = bench_run
    subjects = [row["subject"] for row in report["rows"]]
    assert [s for s in subjects if s not in bench_exec.SPACED_ROWS] == list(bench_exec.ROWS)
    calls = {row["subject"]: row["calls"] for row in report["rows"]}
    assert {calls[name] for name in bench_exec.SERIAL_ROWS} == {3}
    assert calls[bench_exec.ROW_COLD_AGENT] == 1
    assert calls[bench_exec.ROW_GW_AGENT_BURST] == bench_exec.BURST
    assert calls[bench_exec.ROW_GW_AGENT_BIG] == bench_exec.BIG_BURST
    assert all(row["failures"] == 0 for row in report["rows"])
    assert {aim["what"] for aim in report["aims"]} >= {"gateway idle RSS"}
    work = report["workdir"]
    assert not Path(work).exists()
    assert lingering_processes(work) == []  # masters, gateway: all terminated and reaped


def test_the_exec_benchmark_adds_the_spaced_rows_and_their_aims_when_asked(
    bench_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    done, report = bench_run
    for row in bench_exec.SPACED_ROWS:
        assert f"| {row} | 2 |" in done.stdout, done.stdout
    assert {
        row["subject"]: row["calls"] for row in report["rows"] if row["subject"] in bench_exec.SPACED_ROWS
    } == dict.fromkeys(bench_exec.SPACED_ROWS, 2)
    assert "an idle gap of 5-10 ms before each" in done.stdout
    assert "| spaced gateway remote_exec over stdio on the agent | <= 0.65x raw |" in done.stdout
