"""A task's output is bounded on the target: each stream keeps its first ``stream_cap_bytes`` (the rest is
read on, counted and dropped), the status reports the disk use and what was dropped, and reading by offset
still works up to the cap and says the stream was truncated. Real sshd, both session modes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops import RemoteTasks, TaskConflict, TaskStream, TransportSettings
from tests.remoteops import task_helpers as th
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.task_helpers import running_tasks, start_sh

pytestmark = pytest.mark.anyio

root, tasks, gates = th.root, th.tasks, th.gates  # fixtures

CAP = 1024 * 1024
PRINTED = 8 * CAP
SLACK = 64 * 1024  # the small files of a task directory (cmd, supervise.sh, sup, ...)


@pytest.fixture(params=["setsid", "tmux"])
async def capped(
    request: pytest.FixtureRequest, ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path,
    root: Path,
) -> AsyncIterator[RemoteTasks]:  # fmt: skip
    async with ops_factory() as ops, running_tasks(
        ops, tmp_path / "state", root, settings, session=str(request.param), stream_cap_bytes=CAP
    ) as tasks:  # fmt: skip
        yield tasks


def _disk_use(directory: Path) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in directory.iterdir() if p.is_file())


async def test_a_task_printing_eight_times_the_cap_keeps_the_cap_and_reports_what_it_dropped(
    capped: RemoteTasks, root: Path
) -> None:
    info = await start_sh(capped, f"head -c {PRINTED} /dev/zero | tr '\\0' x; echo done >&2")
    with anyio.fail_after(120):
        done = await capped.wait(info.id, timeout_s=100)
    assert done.state == "exited"
    assert done.exit_code == 0
    directory = root / info.id
    with anyio.fail_after(60):
        out = await capped.output(info.id, stream="stdout", tail=True, max_bytes=4)
        err = await capped.output(info.id, stream="stderr")
    assert (out.size, out.data) == (CAP, "xxxx")
    assert err.data == "done\n"  # the other stream is not affected
    # one flooded stream: the cap of it (stored once, in combined) and the other stream, nothing more
    assert _disk_use(directory) <= CAP + len(b"done\n") + SLACK
    status = await capped.status(info.id)
    assert status.output_truncated
    assert status.output_cap_bytes == CAP
    assert status.dropped_bytes == {"stdout": PRINTED - CAP, "stderr": 0}
    assert CAP + len(b"done\n") < status.output_disk_bytes <= CAP + len(b"done\n") + SLACK
    assert status.output_bytes == CAP + len(b"done\n")


async def test_reading_a_truncated_stream_by_offset_ends_at_the_cap_and_says_so(
    capped: RemoteTasks,
) -> None:
    info = await start_sh(capped, f"head -c {PRINTED} /dev/zero | tr '\\0' y")
    with anyio.fail_after(120):
        await capped.wait(info.id, timeout_s=100)
        last = await capped.output(info.id, stream="stdout", since=CAP - 10, max_bytes=64)
        with pytest.raises(TaskConflict):
            await capped.output(info.id, stream="stdout", since=CAP + 1)
    assert last.data == "y" * 10
    assert last.size == CAP
    assert last.complete
    assert last.truncated
    assert last.dropped_bytes == PRINTED - CAP
    assert CAP < last.disk_bytes <= CAP + SLACK  # stored once


async def test_a_task_under_the_cap_is_neither_truncated_nor_dropping(capped: RemoteTasks) -> None:
    info = await start_sh(capped, "echo small")
    with anyio.fail_after(60):
        await capped.wait(info.id, timeout_s=30)
        out = await capped.output(info.id)
    status = await capped.status(info.id)
    assert out.data == "small\n"
    assert not out.truncated
    assert out.dropped_bytes == 0
    assert not status.output_truncated
    assert status.dropped_bytes == {"stdout": 0, "stderr": 0}


def _du_bytes(directory: Path) -> int:
    """What ``du`` says the task directory uses on the target (this machine), in bytes."""
    out = subprocess.run(["du", "-s", "-B1", str(directory)], capture_output=True, check=True, timeout=30)
    return int(out.stdout.split()[0])


LARGE = 40 * 1024 * 1024


@pytest.mark.parametrize("tasks", ["setsid", "tmux/ssh"], indirect=True)
async def test_a_task_printing_40_mib_uses_about_40_mib_in_its_task_directory(
    tasks: RemoteTasks, root: Path
) -> None:
    info = await start_sh(tasks, f"head -c {LARGE} /dev/zero | tr '\\0' z; echo tail >&2")
    with anyio.fail_after(180):
        done = await tasks.wait(info.id, timeout_s=170)
        status = await tasks.status(info.id)
        head = await tasks.output(info.id, stream="stdout", since=LARGE - 4, max_bytes=64)
        err = await tasks.output(info.id, stream="stderr")
        last = await tasks.output(info.id, tail=True, max_bytes=9)
    assert done.state == "exited"
    used = _du_bytes(root / info.id)
    assert LARGE <= used <= LARGE + SLACK  # stored once: not a copy per stream beside the combined one
    assert abs(status.output_disk_bytes - used) <= SLACK  # the status reports the real disk use
    assert status.output_bytes == LARGE + len(b"tail\n")
    assert not status.output_truncated
    assert (head.data, head.size, head.complete) == ("zzzz", LARGE, True)
    assert (err.data, err.size) == ("tail\n", 5)
    # combined ends with both streams' last bytes, in the order they were read (stderr's line may come first)
    assert (last.next_offset, last.size) == (LARGE + 5, LARGE + 5)
    assert last.data.replace("tail\n", "", 1) in ("z" * 4, "z" * 9)


async def _read_all(tasks: RemoteTasks, task_id: str, stream: TaskStream, max_bytes: int) -> str:
    since, pieces = 0, []
    for _ in range(10000):
        chunk = await tasks.output(task_id, stream=stream, since=since, max_bytes=max_bytes)
        assert chunk.offset == since
        pieces.append(chunk.data)
        since = chunk.next_offset
        if chunk.complete:
            return "".join(pieces)
    raise AssertionError(f"{stream} did not complete")


@pytest.mark.parametrize("tasks", ["setsid", "tmux/ssh"], indirect=True)
async def test_interleaved_streams_read_back_exactly_by_offset_and_tail_from_the_one_stored_copy(
    tasks: RemoteTasks, root: Path
) -> None:
    lines = 3000
    script = (
        f'i=0; while [ $i -lt {lines} ]; do echo "out $i"; echo "err $i" >&2; '
        "[ $((i % 500)) = 0 ] && sleep 0.02; i=$((i+1)); done"
    )
    out = "".join(f"out {i}\n" for i in range(lines))
    err = "".join(f"err {i}\n" for i in range(lines))
    with anyio.fail_after(120):
        info = await start_sh(tasks, script)
        await tasks.wait(info.id, timeout_s=100)
        got_out = await _read_all(tasks, info.id, "stdout", 1000)
        got_err = await _read_all(tasks, info.id, "stderr", 32 * 1024)
        got_all = await _read_all(tasks, info.id, "combined", 4096)
        tail_out = await tasks.output(info.id, stream="stdout", tail=True, max_bytes=20)
        tail_err = await tasks.output(info.id, stream="stderr", tail=True, max_bytes=20)
        middle = await tasks.output(info.id, stream="stderr", since=len(err) // 2, max_bytes=100)
        status = await tasks.status(info.id)
    assert got_out == out
    assert got_err == err
    # combined: both streams, each in its own order (their interleaving is the order they were read in)
    assert sorted(got_all.splitlines()) == sorted((out + err).splitlines())
    assert [x for x in got_all.splitlines() if x.startswith("out")] == out.splitlines()
    assert tail_out.data == out[-20:]
    assert (tail_out.next_offset, tail_out.size, tail_out.complete) == (len(out), len(out), True)
    assert tail_err.data == err[-20:]
    assert middle.data == err[len(err) // 2 :][: len(middle.data)]
    assert middle.data
    assert status.output_bytes == len(out) + len(err)
    assert abs(status.output_disk_bytes - _du_bytes(root / info.id)) <= SLACK


async def test_both_streams_read_back_by_offset_across_a_restart_of_the_tasks_object(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, gates: Any
) -> None:
    gate = gates("stored-once-restart")
    state = tmp_path / "state"
    script = f"seq 1 500; seq 1 300 >&2; {gate.shell()}; seq 501 900; echo late >&2"
    out = "".join(f"{i}\n" for i in range(1, 901))
    err = "".join(f"{i}\n" for i in range(1, 301)) + "late\n"
    with anyio.fail_after(120):
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as first:
            info = await start_sh(first, script)
            await first.wait(info.id, timeout_s=30, pattern="^300$", since=0)
            before = await first.output(info.id, stream="stdout", since=0, max_bytes=100)
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as second:
            gate.release()
            done = await second.wait(info.id, timeout_s=60)
            rest = await _read_all(second, info.id, "stdout", 700)
            got_err = await _read_all(second, info.id, "stderr", 100)
            tail = await second.output(info.id, stream="stdout", tail=True, max_bytes=4)
    assert done.outcome == "exited"
    assert before.data == out[:100]
    assert rest == out
    assert got_err == err
    assert tail.data == "900\n"
