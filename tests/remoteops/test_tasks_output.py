"""Task output by byte offset: cursors never skip or repeat a byte (hypothesis, random chunk sizes, real
sshd), text never splits a UTF-8 character, tail mode, reads while the task is still writing."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoteops import RemoteTasks, TaskConflict, TransportSettings
from remoteops._programs import decode_text_prefix
from tests.fixtures.profiles import examples
from tests.remoteops import task_helpers as th
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.task_helpers import remote_root, running_tasks, start_sh

root, tasks = th.root, th.tasks  # fixtures

# ASCII, 2-, 3- and 4-byte characters, newlines and a NUL: every UTF-8 boundary case
CONTENT = ("plain ascii line\n" + "é ü ß\n" + "✓ 漢字 €\n" + "🙂 𝄞\n" + "tab\tand\0nul\n") * 12
CONTENT_BYTES = CONTENT.encode()


@settings(deadline=None)  # a property, not a timing: a loaded machine may pause one example
@given(text=st.text(max_size=300), sizes=st.lists(st.integers(4, 64), min_size=1, max_size=40))
def test_decoding_chunks_at_any_boundary_reassembles_the_text_exactly(text: str, sizes: list[int]) -> None:
    data = text.encode()
    pos, parts, i = 0, [], 0
    while pos < len(data):
        chunk = data[pos : pos + sizes[i % len(sizes)]]
        final = pos + len(chunk) >= len(data)
        part, used = decode_text_prefix(chunk, final=final)
        assert 0 < used <= len(chunk)
        parts.append(part)
        pos += used
        i += 1
    assert "".join(parts) == text


@pytest.fixture
def finished_task(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, shared_dir: Path
) -> Iterator[tuple[BlockingPortal, RemoteTasks, str]]:
    """One finished task whose combined output is CONTENT, in a portal thread for sync hypothesis tests."""
    source = shared_dir / "content"
    source.write_bytes(CONTENT_BYTES)
    source.chmod(0o644)
    with (
        remote_root() as root,
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(ops_factory()) as ops,
        portal.wrap_async_context_manager(running_tasks(ops, tmp_path / "state", root, settings)) as tasks,
    ):
        info = portal.call(lambda: start_sh(tasks, f"cat {source}"))
        done = portal.call(lambda: tasks.wait(info.id, timeout_s=30))
        assert done.outcome == "exited"
        yield portal, tasks, info.id


@pytest.mark.sshd
@pytest.mark.slow
@settings(
    max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=12), text=st.booleans())
def test_output_cursors_with_random_chunk_sizes_never_skip_or_repeat(
    finished_task: tuple[BlockingPortal, RemoteTasks, str], sizes: list[int], text: bool
) -> None:
    portal, tasks, task_id = finished_task
    since, pieces = 0, []
    for i in range(len(CONTENT_BYTES) + 1):
        size = max(sizes[i % len(sizes)], 8)
        encoding = "text" if text else "base64"
        chunk = portal.call(
            lambda s=since, n=size, e=encoding: tasks.output(task_id, since=s, max_bytes=n, encoding=e)
        )
        assert chunk.offset == since
        assert chunk.next_offset == since + chunk.returned_bytes
        pieces.append(chunk.data.encode() if text else base64.b64decode(chunk.data))
        since = chunk.next_offset
        if chunk.complete:
            break
    assert b"".join(pieces) == CONTENT_BYTES
    assert since == len(CONTENT_BYTES)


@pytest.mark.sshd
@pytest.mark.anyio
async def test_tail_returns_the_last_bytes_and_a_cursor_at_the_end(tasks: RemoteTasks) -> None:
    with anyio.fail_after(60):
        info = await start_sh(tasks, "seq 1 1000")
        await tasks.wait(info.id, timeout_s=30)
        last = await tasks.output(info.id, tail=True, max_bytes=10)
        with pytest.raises(TaskConflict):
            await tasks.output(info.id, since=last.size + 1)
    assert last.data == ("\n".join(str(n) for n in range(1, 1001)) + "\n")[-10:]
    assert (last.next_offset, last.size, last.complete) == (last.size, len(last.data) + last.offset, True)


@pytest.mark.sshd
@pytest.mark.anyio
@pytest.mark.parametrize("tasks", th.OVER_SSH, indirect=True)
async def test_reading_while_the_task_writes_collects_every_byte_once(tasks: RemoteTasks) -> None:
    script = (
        'i=0; while [ $i -lt 300 ]; do printf "line %s é✓\\n" $i; i=$((i+1)); '
        "[ $((i % 30)) = 0 ] && sleep 0.05; done; exit 0"
    )
    expected = "".join(f"line {i} é✓\n" for i in range(300))
    with anyio.fail_after(90):
        info = await start_sh(tasks, script)
        since, pieces = 0, []
        for _ in range(2000):
            chunk = await tasks.output(info.id, since=since, max_bytes=257)
            pieces.append(chunk.data)
            since = chunk.next_offset
            if chunk.complete:
                break
            if not chunk.more:  # caught up with a running task: block on the target until it writes more
                await tasks.wait(info.id, timeout_s=5, pattern=".", since=since)
    assert "".join(pieces) == expected
