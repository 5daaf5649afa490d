"""Helpers for the task tests: a RemoteTasks over the real sshd with its remote root in a private /tmp dir,
FIFO gates a task blocks on (released by the test, no sleeps), and what is left on the target afterwards."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest

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


@contextmanager
def remote_root() -> Iterator[Path]:
    """A fresh absolute task root the target's user may create (its parent is 0777); removed afterwards,
    with the tmux server on its socket stopped and every process still carrying a task marker killed."""
    parent = Path(tempfile.mkdtemp(prefix="rogk-", dir="/tmp"))
    parent.chmod(0o777)
    root = parent / "tasks"
    try:
        yield root
    finally:
        sock = root / "tmux.sock"
        if sock.exists():
            owner = sock.stat().st_uid
            subprocess.run(
                ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups", "tmux", "-S", str(sock),
                 "kill-server"],
                capture_output=True, check=False, timeout=10,
            )  # fmt: skip
        for pid in marked_processes(root):
            with suppress(ProcessLookupError):
                os.kill(pid, 9)
        shutil.rmtree(parent, ignore_errors=True)


def _markers(root: Path) -> list[bytes]:
    found = []
    for cmd in root.glob("t-*/cmd"):
        for line in cmd.read_bytes().splitlines():
            if line.startswith(b"export ROG_TASK_MARK="):
                found.append(line.removeprefix(b"export ").replace(b"'", b""))
    return found


def marked_processes(root: Path) -> list[int]:
    """PIDs (on this machine, which is the target) whose environment carries a marker of a task under root."""
    markers = _markers(root) if root.exists() else []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(m in env for m in markers):
            pids.append(int(entry.name))
    return pids


def tmux_sessions(root: Path) -> list[str]:
    sock = root / "tmux.sock"
    if not sock.exists():
        return []
    owner = sock.stat().st_uid
    out = subprocess.run(
        ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups", "tmux", "-S", str(sock),
         "list-sessions", "-F", "#{session_name}"],
        capture_output=True, text=True, check=False, timeout=10,
    )  # fmt: skip
    return out.stdout.split()


class Gate:
    """A FIFO a task blocks on (``read x < path``) until the test releases it. Releasing never blocks:
    the FIFO is opened read-write and kept open (so the line waits for the task) until :meth:`close`."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / name
        os.mkfifo(self.path, 0o666)
        os.chmod(self.path, 0o666)  # noqa: S103 - the target's user (another uid) must open it
        self._fd: int | None = None

    def shell(self) -> str:
        return f"read _gate < {self.path}"

    def release(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
            os.write(self._fd, b"go\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
