"""The task programs' shared shell helpers, run by a real ``sh`` on this machine: the output sizes come out
right with GNU ``stat -c`` and without it (BSD ``stat`` has no ``-c``), and a missing file counts as 0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from remoteops.tasks.scripts import _CHECKS


def _sizes(d: Path, path: str) -> list[int]:
    script = f'd={d} H=- spid=- sst=-\n{_CHECKS}\nsizes\nprintf "%s %s %s\\n" "$zc" "$zo" "$ze"\n'
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=10, env={**os.environ, "PATH": path}
    )
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.split()]


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    d = tmp_path / "t"
    d.mkdir()
    (d / "combined").write_bytes(b"x" * 1234)
    (d / "stdout").write_bytes(b"y" * 1000)
    (d / "stderr").write_bytes(b"z" * 234)
    return d


def test_sizes_reads_the_three_streams_with_stat(task_dir: Path) -> None:
    assert _sizes(task_dir, os.environ["PATH"]) == [1234, 1000, 234]


def test_sizes_falls_back_to_wc_where_stat_has_no_c_option(task_dir: Path, tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    bsd_stat = shims / "stat"
    bsd_stat.write_text("#!/bin/sh\necho 'stat: illegal option -- c' >&2\nexit 1\n")
    bsd_stat.chmod(0o755)
    assert _sizes(task_dir, f"{shims}:{os.environ['PATH']}") == [1234, 1000, 234]


def test_a_missing_stream_file_counts_as_zero_and_shifts_nothing(task_dir: Path) -> None:
    (task_dir / "stdout").unlink()
    assert _sizes(task_dir, os.environ["PATH"]) == [1234, 0, 234]
