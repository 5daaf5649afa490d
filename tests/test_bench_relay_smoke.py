"""Smoke test of the relay benchmark: it runs end to end and prints its table (timings are not judged)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import bench_relay
from tests.fixtures.procs import lingering_processes

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.slow,
    pytest.mark.timeout(660),  # the run's own ceiling (600 s) and slack, not the suite's 300 s
]


def test_bench_relay_prints_its_rows_reports_json_and_cleans_up(tmp_path: Path) -> None:
    # one run gives both the printed table and the JSON report (a second run would only cost time)
    out = tmp_path / "relay.json"
    argv = [sys.executable, "-m", "acceptance.bench_relay", "--calls", "3", "--warmup", "1", "--no-peer"]
    done = subprocess.run(
        [*argv, "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for row in (bench_relay.ROW_DIRECT, bench_relay.ROW_DIRECT_STDIO, bench_relay.ROW_GW_HTTP):
        assert f"| {row} |" in done.stdout, done.stdout
    assert "| subject | median ms | p95 ms | ratio to direct |" in done.stdout
    assert bench_relay.ROW_PEER not in done.stdout  # --no-peer: no mcp-proxy, no extra venv
    result = json.loads(out.read_text(encoding="utf-8"))
    subjects = [row["subject"] for row in result["rows"]]
    assert subjects == [bench_relay.ROW_DIRECT, bench_relay.ROW_DIRECT_STDIO, bench_relay.ROW_GW_HTTP]
    assert all(row["calls"] == 3 for row in result["rows"])
    assert result["peer_mode"] is None
    assert result["table"] in done.stdout  # the file holds what was printed
    # Every process that used the benchmark's tmux socket is gone, and so is the socket.
    sock = result["tmux_socket"]
    # (a killed tmux server's pane shells exit on their SIGHUP, after kill-server returned: given a grace)
    assert lingering_processes(f"LIBTMUX_SOCKET={sock}", environ=True) == []
    assert lingering_processes(sock, environ=True) == []
    tmpdir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
    assert not (tmpdir / sock).exists()
