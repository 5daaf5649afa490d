"""The supervised child: leaving its context (normally or by cancellation) reaps the whole process group."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from remoteops._capture import HeadTail
from remoteops._process import group_alive, run_process, supervised_child
from tests.fixtures.procs import pid_runs

pytestmark = pytest.mark.anyio

# The child starts a grandchild in its own process group, prints both pids and waits.
_FAMILY = 'sleep 300 & echo "$$ $!"; wait'
_STUBBORN = "trap '' TERM; sleep 300 & echo \"$$ $!\"; while :; do wait; done"


async def _pids(proc: anyio.abc.Process) -> tuple[int, int]:
    assert proc.stdout is not None
    line = b""
    with anyio.fail_after(10):
        while not line.endswith(b"\n"):
            line += await proc.stdout.receive(64)
    child, grandchild = (int(word) for word in line.split())
    return child, grandchild


async def test_leaving_the_context_kills_the_child_and_its_grandchild_in_the_group() -> None:
    async with supervised_child(["sh", "-c", _FAMILY]) as proc:
        child, grandchild = await _pids(proc)
        assert os.getpgid(grandchild) == proc.pid
        assert pid_runs(child)
        assert pid_runs(grandchild)
    assert proc.returncode is not None
    assert not pid_runs(child)
    assert not pid_runs(grandchild)
    assert not group_alive(proc.pid)


async def test_cancelling_inside_the_context_reaps_the_whole_group() -> None:
    pids: list[int] = []
    with anyio.move_on_after(60) as scope:  # only a ceiling: the test cancels it itself below
        async with supervised_child(["sh", "-c", _FAMILY]) as proc:
            pids.extend(await _pids(proc))
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert len(pids) == 2
    assert proc.returncode is not None
    assert not any(pid_runs(pid) for pid in pids)


async def test_a_group_that_ignores_sigterm_gets_sigkill_after_the_grace() -> None:
    with anyio.fail_after(10):
        async with supervised_child(["sh", "-c", _STUBBORN], grace_s=0.3) as proc:
            child, grandchild = await _pids(proc)
    assert proc.returncode == -9
    assert not pid_runs(child)
    assert not pid_runs(grandchild)


async def test_an_exception_inside_the_context_still_reaps_and_propagates() -> None:
    pids: list[int] = []

    async def fail_inside() -> None:
        async with supervised_child(["sh", "-c", _FAMILY], stdin=subprocess.DEVNULL) as proc:
            pids.extend(await _pids(proc))
            raise LookupError

    with pytest.raises(LookupError):
        await fail_inside()
    assert len(pids) == 2
    assert not any(pid_runs(pid) for pid in pids)


def _children_running(marker: str) -> list[int]:
    """Our own live children whose command line carries ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == os.getpid() and fields[0] not in ("Z", "X") and marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def test_a_cancel_that_lands_during_the_spawn_never_leaves_an_unowned_child() -> None:
    # Deadlines from "before the fork" to "after the pipes are connected": whichever moment the cancel hits,
    # either no child was started or the context owns (and reaps) it.
    marker = f"rog-spawn-{os.getpid()}"
    for step in range(60):
        with anyio.move_on_after(step * 0.0002):
            async with supervised_child(["sh", "-c", f": {marker}; sleep 300"]):
                await anyio.sleep_forever()
    assert _children_running(marker) == []


async def test_stdin_left_unread_by_a_holder_outside_the_group_is_dropped_and_its_pipe_closed(
    tmp_path: Path,
) -> None:
    # The child hands its stdin to a process in another session (as an ssh client hands it to its
    # master) that never reads, and exits. What was not written yet cannot reach anyone: run_process
    # must end without waiting on that pipe and must not leave its descriptor open (a ResourceWarning,
    # an error in this suite, would follow when the transport is collected).
    pidfile = tmp_path / "holder.pid"
    script = (
        'exec 3<&0; setsid sh -c \'echo $$ > "$1"; exec sleep 30\' holder "$0" <&3 3<&- >/dev/null 2>&1 & '
        'while [ ! -s "$0" ]; do sleep 0.01; done; exit 0'
    )
    payload = b"x" * (4 * 1024 * 1024)  # far beyond a pipe's buffer
    holder = 0
    try:
        with anyio.fail_after(30):
            outcome = await run_process(
                ["sh", "-c", script, str(pidfile)],
                stdin=payload,
                stdout=HeadTail(1024, 0),
                stderr=HeadTail(1024, 0),
            )
        holder = int(pidfile.read_text())
        assert outcome.returncode == 0
        held = os.readlink(f"/proc/{holder}/fd/0")  # pipe:[inode], the read end the holder keeps
        assert held.startswith("pipe:")
        ours = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                ours.append(os.readlink(f"/proc/self/fd/{fd}"))
        assert held not in ours  # our write end is closed, not left to the garbage collector
        gc.collect()
    finally:
        if holder:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
