"""The task programs' shared shell helpers and the read program, run by a real ``sh`` on this machine: a task
stores its output once (combined and an index of its runs): the sizes come from the index measured against
combined, and any window of one stream read back is exactly that stream's bytes. A task started before that
(a file per stream) still has its sizes right with GNU ``stat -c`` and without it (BSD ``stat`` has no
``-c``), and a missing file counts as 0."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest

from remoteops.tasks.scripts import _CHECKS, READ_SCRIPT


def _sizes(d: Path, path: str) -> list[int]:
    script = f'd={d} H=- spid=- sst=-\n{_CHECKS}\nsizes\nprintf "%s %s %s %s\\n" "$zc" "$zo" "$ze" "$zd"\n'
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
    assert _sizes(task_dir, os.environ["PATH"]) == [1234, 1000, 234, 2468]


def test_sizes_falls_back_to_wc_where_stat_has_no_c_option(task_dir: Path, tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    bsd_stat = shims / "stat"
    bsd_stat.write_text("#!/bin/sh\necho 'stat: illegal option -- c' >&2\nexit 1\n")
    bsd_stat.chmod(0o755)
    assert _sizes(task_dir, f"{shims}:{os.environ['PATH']}") == [1234, 1000, 234, 2468]


def test_a_missing_stream_file_counts_as_zero_and_shifts_nothing(task_dir: Path) -> None:
    (task_dir / "stdout").unlink()
    assert _sizes(task_dir, os.environ["PATH"]) == [1234, 0, 234, 1468]


def _stored_once(d: Path, runs: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """A task directory as the supervisor leaves it: combined, and a line of index per run; each stream."""
    d.mkdir()
    combined, index, streams = b"", "", {"o": b"", "e": b""}
    for letter, data in runs:
        index += f"{letter} {len(combined)}\n"
        combined += data
        streams[letter] += data
    (d / "combined").write_bytes(combined)
    (d / "index").write_text(index)
    (d / "cap").write_text("1000000\n")
    return {"stdout": streams["o"], "stderr": streams["e"]}


def test_sizes_of_output_stored_once_come_from_the_index_and_count_it_as_disk_use(tmp_path: Path) -> None:
    d = tmp_path / "t"
    _stored_once(d, [("o", b"aaaa"), ("e", b"BBB"), ("o", b"cc")])
    assert _sizes(d, os.environ["PATH"]) == [9, 6, 3, 9 + len("o 0\ne 4\no 7\n")]
    # a run whose line is written but whose bytes are not yet in combined counts for nothing
    with (d / "index").open("a") as index:
        index.write("e 9\n")
    assert _sizes(d, os.environ["PATH"])[:3] == [9, 6, 3]


def _read(d: Path, stream: str, since: int, limit: int, tail: bool = False) -> tuple[list[str], bytes]:
    argv = ["sh", "-s", "--", str(d), "-", "-", "-", stream, str(since), str(limit), "1" if tail else "0"]
    done = subprocess.run(argv, input=READ_SCRIPT, capture_output=True, text=True, timeout=10, check=True)
    head, _, body = done.stdout.partition("\n")
    return head.split()[1:], base64.b64decode("".join(body.split()))


def test_every_window_of_one_stream_stored_once_reads_back_exactly(tmp_path: Path) -> None:
    runs = [("o" if i % 3 else "e", bytes([65 + i % 26]) * (1 + i % 4)) for i in range(30)]
    streams = _stored_once(tmp_path / "t", runs)
    for stream, data in streams.items():
        for since in range(len(data) + 1):
            for limit in (1, 6, 100):
                fields, got = _read(tmp_path / "t", stream, since, limit)
                assert fields[:4] == ["ok", "lost", "-", str(len(data))]
                assert int(fields[4]) == since
                assert got == data[since : since + limit]
        fields, got = _read(tmp_path / "t", stream, 0, 7, tail=True)
        assert (got, int(fields[4])) == (data[-7:], len(data) - 7)
        assert _read(tmp_path / "t", stream, len(data) + 1, 5)[0] == ["cursor", str(len(data))]


def test_a_read_of_one_stream_spread_over_many_runs_returns_fewer_bytes_not_wrong_ones(
    tmp_path: Path,
) -> None:
    runs = [(("o", "e")[i % 2], b"%04d" % i) for i in range(1200)]  # 600 runs of each stream
    streams = _stored_once(tmp_path / "t", runs)
    out = streams["stdout"]
    fields, got = _read(tmp_path / "t", "stdout", 0, len(out))
    assert 0 < len(got) < len(out)
    assert got == out[: len(got)]
    fields, got = _read(tmp_path / "t", "stdout", 0, len(out), tail=True)
    start = int(fields[4])
    assert 0 < start < len(out)
    assert got == out[start:]


def test_a_task_started_before_output_was_stored_once_reads_each_stream_from_its_own_file(
    task_dir: Path,
) -> None:
    fields, got = _read(task_dir, "stderr", 200, 50)
    assert (fields[3], fields[4], got) == ("234", "200", b"z" * 34)
    fields, got = _read(task_dir, "stdout", 0, 3, tail=True)
    assert (fields[3], fields[4], got) == ("1000", "997", b"yyy")
    assert fields[-1] == "2468"  # disk: its three files
