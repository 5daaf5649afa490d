"""Smoke test of the audit benchmark: it writes chained and unchained logs, verifies one and scrubs outputs,
and prints its tables (timings are not judged here; docs/audit.md's figures come from a full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_audit

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # a few seconds of writing, in a subprocess


def test_bench_audit_prints_its_tables_and_its_json_counts_what_it_verified_and_masked(
    tmp_path: Path,
) -> None:
    # one run gives both the printed tables and the JSON report
    out = tmp_path / "audit.json"
    argv = [sys.executable, "-m", "acceptance.bench_audit", "--records", "500", "--rounds", "1"]
    done = subprocess.run(
        [*argv, "--verify", "2000", "--json-out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for row in (bench_audit.ROW_OFF, bench_audit.ROW_ON, bench_audit.ROW_WRITER_ON, bench_audit.ROW_VERIFY):
        assert f"| {row} |" in done.stdout, done.stdout
    assert "| chain on / off |" in done.stdout
    assert "| scrub 1 MiB log lines + PEM + AWS key | " in done.stdout
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["verify"]["records"] == 2000
    assert result["write"][bench_audit.ROW_ON]["median_per_s"] > 0
    assert result["scrub"]["scrub 1 MiB log lines + PEM + AWS key"]["masked"] >= 2
    assert result["scrub"]["scrub 1 MiB log lines (no secret)"]["masked"] == 0
