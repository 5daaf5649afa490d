"""Task cancellation (INT → TERM → KILL, descendants that left the group), recovery after a restart of the
tasks object, retention, listing and health — against the real sshd (the target is this machine)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops import RemoteTasks, StateStore, TaskSettings, TransportSettings
from remoteops.tasks.manager import TASKS
from tests.remoteops import task_helpers as th
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.task_helpers import files_of, marked_processes, running_tasks, start_sh, tmux_sessions

pytestmark = [pytest.mark.sshd, pytest.mark.anyio]
root, gates, tasks = th.root, th.gates, th.tasks  # fixtures


async def _ready(tasks: RemoteTasks, task_id: str, text: str) -> None:
    """Block (on the target) until the task printed ``text``: its traps are installed by then."""
    result = await tasks.wait(task_id, timeout_s=30, pattern=text, since=0)
    assert result.outcome == "matched", result


@pytest.mark.parametrize("tasks", th.OVER_SSH, indirect=True)
async def test_cancel_of_a_plain_command_ends_at_sigint(tasks: RemoteTasks, root: Path) -> None:
    with anyio.fail_after(60):
        info = await start_sh(tasks, "echo up; exec sleep 1000")
        await _ready(tasks, info.id, "up")
        result = await tasks.cancel(info.id)
    assert (result.step, result.state, result.signal) == ("INT", "cancelled", "SIGINT")
    assert result.session_removed is True
    assert marked_processes(root) == []
    assert info.id not in tmux_sessions(root)


@pytest.mark.slow
async def test_cancel_of_a_process_that_traps_sigint_escalates_to_sigterm(
    tasks: RemoteTasks, root: Path
) -> None:
    script = "trap 'echo ignoring INT' INT; echo armed; while :; do sleep 1; done"
    with anyio.fail_after(60):
        info = await start_sh(tasks, script)
        await _ready(tasks, info.id, "armed")
        result = await tasks.cancel(info.id)
        out = await tasks.output(info.id)
    assert result.step == "TERM"
    assert result.state == "cancelled"
    assert "ignoring INT" in out.data  # SIGINT really arrived and was refused
    assert marked_processes(root) == []


@pytest.mark.slow
async def test_cancel_escalates_to_sigkill_and_finds_descendants_that_left_the_group(
    tasks: RemoteTasks, root: Path
) -> None:
    # a grandchild in its own session (setsid) ignores everything it can; the task itself too
    script = (
        "setsid sh -c 'trap \"\" INT TERM; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & "
        "trap '' INT TERM; echo armed; while :; do sleep 1; done"
    )
    with anyio.fail_after(60):
        info = await start_sh(tasks, script)
        await _ready(tasks, info.id, "armed")
        assert len(marked_processes(root)) >= 2
        result = await tasks.cancel(info.id)
    assert result.step == "KILL"
    assert result.session_removed is True
    assert marked_processes(root) == []  # the escaped grandchild is gone too
    assert info.id not in tmux_sessions(root)


async def test_cancel_after_exit_says_already_exited_and_keeps_the_exit_code(tasks: RemoteTasks) -> None:
    with anyio.fail_after(60):
        info = await start_sh(tasks, "exit 4")
        await tasks.wait(info.id, timeout_s=30)
        result = await tasks.cancel(info.id)
    assert (result.step, result.state, result.exit_code) == ("already_exited", "exited", 4)


async def test_after_a_restart_a_running_task_is_reattached_and_completes_under_the_same_id(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, gates: Any
) -> None:
    gate = gates("restart")
    state = tmp_path / "state"
    with anyio.fail_after(90):
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as first:
            info = await start_sh(first, f"echo started >> {gate.path}.count; {gate.shell()}; exit 9")
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as second:
            status = await second.status(info.id)
            gate.release()
            done = await second.wait(info.id, timeout_s=30)
    assert status.state == "running"
    assert (done.outcome, done.exit_code) == ("exited", 9)
    assert await anyio.Path(f"{gate.path}.count").read_text() == "started\n"  # it ran exactly once


async def test_a_task_that_finished_while_the_gateway_was_down_is_exited_after_restart(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, gates: Any
) -> None:
    gate = gates("finish-while-down")
    state = tmp_path / "state"
    with anyio.fail_after(90):
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as first:
            info = await start_sh(first, f"{gate.shell()}; exit 6")
        await th.released_and_gone(gate, root, info.id)  # supervisor wrote the exit file and exited
        assert [n for n in files_of(root, info.id) if n.startswith("exit.")]
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as second:
            status = await second.status(info.id)
    assert (status.state, status.exit_code) == ("exited", 6)


async def test_a_task_whose_supervisor_vanished_without_an_exit_file_is_lost(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    state = tmp_path / "state"
    with anyio.fail_after(90):
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as first:
            info = await start_sh(first, "echo up; exec sleep 1000")
            await _ready(first, info.id, "up")
        sup_pid = int((root / info.id / "sup").read_text().split()[0])
        pgid = int((root / info.id / "pgid").read_text())
        os.kill(sup_pid, signal.SIGKILL)
        os.killpg(pgid, signal.SIGKILL)
        async with ops_factory() as ops, running_tasks(ops, state, root, settings) as second:
            waited = await second.wait(info.id, timeout_s=10)
            listed, _ = second.list_tasks(state="lost")
    assert waited.outcome == "lost"
    assert [t.id for t in listed] == [info.id]


async def test_finished_tasks_are_purged_after_the_retention_age(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    now = [1_000_000.0]
    state = tmp_path / "state"
    async with ops_factory() as ops:
        tasks = RemoteTasks(
            ops, StateStore(state), TaskSettings(remote_dir=str(root), retention_s=3600), settings,
            clock=lambda: now[0],
        )  # fmt: skip
        async with tasks:
            with anyio.fail_after(60):
                old = await start_sh(tasks, "exit 0")
                await tasks.wait(old.id, timeout_s=30)
                young = await start_sh(tasks, "exit 0")
                now[0] += 3000
                await tasks.wait(young.id, timeout_s=30)
                now[0] += 700
                purged = await tasks.purge_expired()
    assert purged == [old.id]
    assert not (root / old.id).exists()
    assert (root / young.id).exists()
    store = StateStore(state)
    store.open_sync()
    assert set(store.load_all_sync(TASKS)) == {young.id}


async def test_list_is_bounded_and_filtered_and_health_counts_by_state(tasks: RemoteTasks) -> None:
    with anyio.fail_after(60):
        done = [await start_sh(tasks, f"exit {n}") for n in range(3)]
        for info in done:
            await tasks.wait(info.id, timeout_s=30)
        running = await start_sh(tasks, "exec sleep 1000")
        two, total = tasks.list_tasks(limit=2)
        exited, n_exited = tasks.list_tasks(state="exited")
        elsewhere, n_elsewhere = tasks.list_tasks(target="sudo")
        health = tasks.health()
        await tasks.cancel(running.id)
    assert (len(two), total) == (2, 4)
    assert two[0].id == running.id  # newest first
    assert n_exited == 3
    assert {t.exit_code for t in exited} == {0, 1, 2}
    assert (elsewhere, n_elsewhere) == ([], 0)
    assert health.by_state == {"exited": 3, "running": 1}
    assert health.total == 4


async def test_back_to_back_short_tasks_all_start_while_their_tmux_server_closes(tasks: RemoteTasks) -> None:
    # Each task's end closes its tmux server's last session; the next start reaches that server while it is
    # closing ("server exited unexpectedly" from tmux). The starter retries that, bounded; nothing is lost.
    with anyio.fail_after(120):
        started = [await start_sh(tasks, "exit 0") for _ in range(25)]
        for info in started:
            await tasks.wait(info.id, timeout_s=30)
    _, total = tasks.list_tasks(state="exited")
    assert total == 25


async def test_a_truncated_task_record_at_startup_is_kept_aside_and_reported(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    state = tmp_path / "state"
    async with ops_factory() as ops:
        async with running_tasks(ops, state, root, settings) as first:
            with anyio.fail_after(60):
                info = await start_sh(first, "exit 0")
                await first.wait(info.id, timeout_s=30)
        record = state / "tasks" / f"{info.id}.json"
        data = await anyio.Path(record).read_bytes()
        await anyio.Path(record).write_bytes(data[:40])
        store = StateStore(state)
        async with RemoteTasks(ops, store, TaskSettings(remote_dir=str(root)), settings) as second:
            assert second.list_tasks()[1] == 0
            [problem] = store.problems
    assert (problem.kind, problem.record_id, problem.reason) == ("tasks", info.id, "not_json")
    assert problem.moved_to is not None
    assert await anyio.Path(problem.moved_to).read_bytes() == data[:40]


async def test_a_record_whose_id_could_escape_the_task_root_is_refused_at_load(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    state = tmp_path / "state"
    bad = {
        "kind": "tasks",
        "version": 1,
        "record": {"id": "t-../../home", "target": "plain", "state": "exited", "exit_hash": "0" * 64,
                   "marker": "m", "created_at": 0.0, "finished_at": 0.0},
    }  # fmt: skip
    tasks_dir = anyio.Path(state / "tasks")
    await tasks_dir.mkdir(parents=True, mode=0o700)
    await (tasks_dir / "t-00000000000000bb.json").write_text(json.dumps(bad))
    store = StateStore(state)
    async with (
        ops_factory() as ops,
        RemoteTasks(ops, store, TaskSettings(remote_dir=str(root)), settings) as t,
    ):
        assert await t.purge_expired() == []
        assert t.list_tasks()[1] == 0
    assert [(p.record_id, p.reason) for p in store.problems] == [("t-00000000000000bb", "invalid")]
