"""Long-running tasks against the real sshd (the target is this machine, user ro-plain): detached start,
records, output cursors, waits on the target, non-spoofable completion, cancellation, recovery, retention."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops import (
    RemoteTasks,
    StateStore,
    TaskConflict,
    TaskNotFound,
    TransportSettings,
)
from remoteops.tasks.manager import TASKS
from tests.remoteops import task_helpers as th
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.task_helpers import files_of, running_tasks, start_sh

pytestmark = [pytest.mark.sshd, pytest.mark.anyio]
root, gates, tasks = th.root, th.gates, th.tasks  # fixtures


@pytest.mark.parametrize("tasks", th.OVER_SSH, indirect=True)
async def test_a_task_runs_detached_and_reports_exit_code_and_separate_streams(
    tasks: RemoteTasks, root: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(60):
        info = await start_sh(tasks, "echo out; echo err >&2; exit 7")
        # the record is on disk before start returns, with the supervisor's identity
        on_disk = StateStore(tmp_path / "state")
        on_disk.open_sync()
        stored = on_disk.get_sync(TASKS, info.id)
        assert stored is not None
        assert stored.state == "running"
        assert stored.sup_pid is not None
        done = await tasks.wait(info.id, timeout_s=30)
        out = await tasks.output(info.id, stream="stdout")
        err = await tasks.output(info.id, stream="stderr")
        both = await tasks.output(info.id)
    assert (done.outcome, done.state, done.exit_code) == ("exited", "exited", 7)
    assert (out.data, err.data) == ("out\n", "err\n")
    assert sorted(both.data.splitlines()) == ["err", "out"]
    assert both.complete is True
    assert info.mode == tasks.health().session
    assert info.remote_dir == str(root / info.id)
    assert (root / info.id).stat().st_mode & 0o777 == 0o700


async def test_argv_cwd_and_env_arrive_literally(tasks: RemoteTasks, shared_dir: Path) -> None:
    odd = "a b'c\"$(touch /tmp/rog-pwned)\n;`x`"
    with anyio.fail_after(60):
        info = await tasks.start(
            "plain",
            ["sh", "-c", 'printf "%s|%s|%s" "$1" "$GREETING" "$(pwd)"', "zero", odd],
            cwd=str(shared_dir),
            env={"GREETING": "hello world"},
        )
        await tasks.wait(info.id, timeout_s=30)
        out = await tasks.output(info.id)
    assert out.data == f"{odd}|hello world|{shared_dir}"
    assert info.env_names == ["GREETING"]
    assert not await anyio.Path("/tmp/rog-pwned").exists()


@pytest.mark.parametrize("tasks", th.OVER_SSH, indirect=True)
async def test_wait_gives_still_running_at_its_bound_then_matched_then_exited(
    tasks: RemoteTasks, gates: Any
) -> None:
    first, second = gates("first"), gates("second")
    script = f"echo begin; {first.shell()}; echo ready now; {second.shell()}; echo bye; exit 3"
    with anyio.fail_after(90):
        info = await start_sh(tasks, script)
        early = await tasks.wait(info.id, timeout_s=0.3)
        assert early.outcome == "still_running"
        first.release()
        matched = await tasks.wait(info.id, timeout_s=30, pattern="re[a-z]+ now", since=0)
        assert matched.outcome == "matched"
        assert matched.matched == "ready now"
        second.release()
        done = await tasks.wait(info.id, timeout_s=30, pattern="never printed")
    assert (done.outcome, done.exit_code) == ("exited", 3)
    assert done.output_bytes == len("begin\nready now\nbye\n")


async def test_wait_returns_after_the_task_exits_not_at_its_bound(tasks: RemoteTasks, gates: Any) -> None:
    gate = gates("exit")
    with anyio.fail_after(60):
        info = await start_sh(tasks, f"{gate.shell()}; exit 0")
        async with anyio.create_task_group() as tg:
            results: list[Any] = []

            async def waiter() -> None:
                results.append(await tasks.wait(info.id, timeout_s=300))

            tg.start_soon(waiter)
            gate.release()
        # well inside fail_after(60), far below the 300 s bound: it ended because the task ended
    assert results[0].outcome == "exited"
    assert results[0].waited_ms < 60_000


async def test_wait_reports_progress_with_the_bytes_so_far(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, gates: Any
) -> None:
    first, second = gates("progress1"), gates("progress2")
    seen: list[int] = []
    grown = anyio.Event()

    async def on_progress(size: int) -> None:
        seen.append(size)
        if size == 13:
            grown.set()

    fast = {"progress_interval_s": 0.2, "wait_segment_s": 0.5}
    async with ops_factory() as ops, running_tasks(ops, tmp_path / "state", root, settings, **fast) as tasks:
        with anyio.fail_after(60):
            info = await start_sh(tasks, f"echo first; {first.shell()}; echo second; {second.shell()}")
            # the first line is out before the progress wait begins: a segment that ended before the task
            # printed anything (a loaded machine) would report 0 bytes, which is no size this test expects
            await tasks.wait(info.id, timeout_s=30, pattern="^first$", since=0)
            results: list[Any] = []

            async def waiter() -> None:
                results.append(await tasks.wait(info.id, timeout_s=50, progress=on_progress))

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                first.release()
                await grown.wait()  # reported while the same wait call goes on
                second.release()
    assert results[0].outcome == "exited"
    assert 13 in seen
    assert all(size in (6, 13) for size in seen), seen


@pytest.mark.parametrize("tasks", th.OVER_SSH, indirect=True)
async def test_a_task_that_forges_completion_markers_does_not_complete_early(
    tasks: RemoteTasks, root: Path, gates: Any
) -> None:
    with anyio.fail_after(90):
        honest = await start_sh(tasks, "exit 0")
        await tasks.wait(honest.id, timeout_s=30)
        [real_exit] = [name for name in files_of(root, honest.id) if name.startswith("exit.")]
        gate = gates("forger")
        forger = f"""
            rnd=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')
            for guess in {real_exit} exit.$rnd exit.0 exit.; do
              printf '0\\n' > "$guess"
            done
            cp {root / honest.id / real_exit} .
            printf 'ROGWAIT exited 0 0 0 0 - - -\\n\\036ROGdeadbeefE0\\n{real_exit}\\n'
            printf 'ROGWAIT exited 0 0 0 0 - - -\\n' >&2
            {gate.shell()}
            exit 5
        """
        info = await start_sh(tasks, forger)
        still = await tasks.wait(info.id, timeout_s=1.0)
        status = await tasks.status(info.id)
        gate.release()
        done = await tasks.wait(info.id, timeout_s=30)
    assert still.outcome == "still_running"
    assert status.state == "running"
    assert (done.outcome, done.exit_code) == ("exited", 5)


async def test_the_nonce_appears_in_no_command_environment_file_or_output(
    tasks: RemoteTasks, root: Path, shared_dir: Path, tmp_path: Path
) -> None:
    dump = shared_dir / "seen"
    spy = f"""
        for p in /proc/[0-9]*; do cat $p/cmdline $p/environ 2>/dev/null; echo; done > {dump}
        for f in ./* ./.*; do [ -f "$f" ] && cat "$f"; done >> {dump} 2>/dev/null
        ls -a >> {dump}
        echo visible output
    """
    with anyio.fail_after(60):
        info = await start_sh(tasks, spy)
        done = await tasks.wait(info.id, timeout_s=30)
        out = await tasks.output(info.id)
    assert done.outcome == "exited"
    files = files_of(root, info.id)
    [exit_name] = [name for name in files if name.startswith("exit.")]
    nonce = exit_name.removeprefix("exit.").encode()
    assert len(nonce) == 32
    assert nonce not in dump.read_bytes()
    assert nonce not in out.data.encode()
    for name, content in files.items():
        assert nonce not in content, name
    state_files = list((tmp_path / "state").rglob("*.json"))  # the gateway keeps only its hash
    assert state_files
    for path in state_files:
        assert nonce not in path.read_bytes()


async def test_unknown_task_ids_are_not_found(tasks: RemoteTasks) -> None:
    for bad in ("t-0000000000000000", "../etc", ""):
        with pytest.raises(TaskNotFound):
            await tasks.status(bad)


async def test_a_start_on_an_unconfigured_target_writes_no_record(tasks: RemoteTasks) -> None:
    from remoteops import PolicyDenied

    with pytest.raises(PolicyDenied):
        await tasks.start("nowhere", ["true"])
    assert tasks.list_tasks()[1] == 0


async def test_a_start_that_cannot_connect_is_recorded_failed(tasks: RemoteTasks) -> None:
    from remoteops import ConnectError

    with anyio.fail_after(60), pytest.raises(ConnectError):
        await tasks.start("closed", ["true"])
    [info], _ = tasks.list_tasks(state="failed")
    assert info.target == "closed"
    with pytest.raises(TaskConflict):
        await tasks.wait(info.id, timeout_s=1)


def _kill_group_leader(root: Path, task_id: str) -> None:
    sup_pid = int((root / task_id / "sup").read_text().split()[0])
    pgid = int((root / task_id / "pgid").read_text())
    os.kill(sup_pid, signal.SIGKILL)
    os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
async def test_a_descendant_holding_the_output_open_does_not_hold_up_completion(
    tasks: RemoteTasks, root: Path
) -> None:
    with anyio.fail_after(60):
        info = await start_sh(tasks, "sleep 1000 & echo parent done; exit 2")
        done = await tasks.wait(info.id, timeout_s=30)
        out = await tasks.output(info.id)
        assert len(th.marked_processes(root)) == 1  # the escaped sleep is still there...
        cancelled = await tasks.cancel(info.id)
    assert (done.outcome, done.exit_code) == ("exited", 2)
    assert out.data == "parent done\n"
    assert cancelled.step in ("INT", "TERM")
    assert th.marked_processes(root) == []  # ...until cancel finds it by its marker
