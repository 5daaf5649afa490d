"""A task's output is bounded on the target: each stream keeps its first ``stream_cap_bytes`` (the rest is
read on, counted and dropped), the status reports the disk use and what was dropped, and reading by offset
still works up to the cap and says the stream was truncated. Real sshd, both session modes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from remoteops import RemoteTasks, TaskConflict, TransportSettings
from tests.remoteops import task_helpers as th
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.task_helpers import running_tasks, start_sh

pytestmark = pytest.mark.anyio

root = th.root  # fixture

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
    assert (directory / "stdout").stat().st_size == CAP
    assert (directory / "stderr").read_bytes() == b"done\n"  # the other stream is not affected
    # one flooded stream: its file and combined hold the cap each, nothing more
    assert _disk_use(directory) <= 2 * CAP + len(b"done\n") + SLACK
    status = await capped.status(info.id)
    assert status.output_truncated
    assert status.output_cap_bytes == CAP
    assert status.dropped_bytes == {"stdout": PRINTED - CAP, "stderr": 0}
    assert status.output_disk_bytes == 2 * CAP + 2 * len(b"done\n")
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
    assert last.disk_bytes == 2 * CAP


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
