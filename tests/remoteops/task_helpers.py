"""Helpers for the task tests: a RemoteTasks over the real sshd with its remote root in a private /tmp dir,
FIFO gates a task blocks on (released by the test, no sleeps), and what is left on the target afterwards
(root, gates and leftovers come from ``acceptance/harness/targets.py``, shared with acceptance)."""

from __future__ import annotations

import os
import select
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acceptance.harness.targets import Gate, marked_processes, remote_root, tmux_sessions
from remoteops import RemoteOps, RemoteTasks, StateStore, TaskInfo, TaskSettings, TransportSettings
from tests.remoteops.conftest import OpsFactory

__all__ = [
    "OVER_SSH",
    "Gate",
    "files_of",
    "gates",
    "marked_processes",
    "released_and_gone",
    "remote_root",
    "root",
    "running_tasks",
    "start_sh",
    "tasks",
    "tmux_sessions",
]


@asynccontextmanager
async def running_tasks(
    ops: RemoteOps, state_dir: Path, root: Path, transport: TransportSettings, **overrides: Any
) -> AsyncIterator[RemoteTasks]:
    settings = TaskSettings(remote_dir=str(root), **overrides)
    async with RemoteTasks(ops, StateStore(state_dir), settings, transport) as tasks:
        yield tasks


async def start_sh(tasks: RemoteTasks, script: str, **kwargs: Any) -> TaskInfo:
    return await tasks.start("plain", shell=script, **kwargs)


def files_of(root: Path, task_id: str) -> dict[str, bytes]:
    d = root / task_id
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


@pytest.fixture
def root() -> Iterator[Path]:
    with remote_root() as path:
        yield path


@pytest.fixture
def gates(shared_dir: Path) -> Iterator[Any]:
    made: list[Gate] = []

    def gate(name: str) -> Gate:
        g = Gate(shared_dir, name)
        made.append(g)
        return g

    yield gate
    for g in made:
        g.close()


OVER_SSH = ["setsid", "tmux", "setsid/ssh", "tmux/ssh"]
"""``tasks`` parameters for the key tests that also run over the ssh carrier (``indirect=True``)."""


@pytest.fixture(params=["setsid", "tmux"])
async def tasks(
    request: pytest.FixtureRequest, ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path,
    root: Path,
) -> AsyncIterator[RemoteTasks]:  # fmt: skip
    """Tasks over the fixture sshd; the parameter is ``session`` or ``session/carrier`` (default: auto, which
    is the agent on this target). Over ``ssh`` the fixture checks that no command took the agent."""
    session, _, carrier = str(request.param).partition("/")
    overrides = {"carrier": carrier} if carrier else {}
    async with ops_factory(**overrides) as ops, running_tasks(ops, tmp_path / "state", root, settings,
                                                              session=session) as t:  # fmt: skip
        yield t
        if carrier:
            assert ops.stats().carriers["plain"].carrier == carrier


async def released_and_gone(gate: Gate, root: Path, task_id: str) -> None:
    """Release ``gate`` and block until the task's supervisor process has exited (pidfd, no polling)."""
    sup_pid = int((root / task_id / "sup").read_text().split()[0])
    pidfd = os.pidfd_open(sup_pid)
    try:
        gate.release()
        ready, _, _ = await anyio.to_thread.run_sync(select.select, [pidfd], [], [], 30.0)
        assert ready, "the supervisor did not exit within 30 s"
    finally:
        os.close(pidfd)
