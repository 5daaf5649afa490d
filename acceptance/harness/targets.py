"""What a test or an acceptance phase leaves on this machine as a target: private remote roots for tasks and
sessions (their tmux server stopped afterwards), the processes still carrying a task's marker, FIFO gates a
remote command blocks on until released (no sleeps), tmux asked directly as the target's user, and the
ControlMasters a killed gateway left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from acceptance.harness import starts

__all__ = [
    "Gate",
    "exit_masters",
    "marked_processes",
    "remote_root",
    "session_root",
    "task_markers",
    "tmux_as_owner",
    "tmux_sessions",
]


@starts("command")
def tmux_as_owner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run tmux on the root's socket (``root/tmux.sock``) as the user who owns it (the target's user)."""
    sock = root / "tmux.sock"
    owner = sock.stat().st_uid
    return subprocess.run(
        ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups", "tmux", "-S", str(sock), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )


@starts("command")
def tmux_sessions(root: Path) -> list[str]:
    """Names of the sessions alive on the root's tmux server (none when it is not running)."""
    if not (root / "tmux.sock").exists():
        return []
    out = tmux_as_owner(root, "list-sessions", "-F", "#{session_name}")
    return out.stdout.split() if out.returncode == 0 else []


def task_markers(root: Path) -> list[bytes]:
    """The ``ROG_TASK_MARK=<marker>`` environment entries of the tasks under ``root``."""
    found = []
    for cmd in root.glob("t-*/cmd"):
        for line in cmd.read_bytes().splitlines():
            if line.startswith(b"export ROG_TASK_MARK="):
                found.append(line.removeprefix(b"export ").replace(b"'", b""))
    return found


def marked_processes(root: Path) -> list[int]:
    """PIDs (on this machine, which is the target) whose environment carries a marker of a task under root."""
    markers = task_markers(root) if root.exists() else []
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


@starts("command")
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
        if (root / "tmux.sock").exists():
            tmux_as_owner(root, "kill-server")
        for pid in marked_processes(root):
            with suppress(ProcessLookupError):
                os.kill(pid, 9)
        shutil.rmtree(parent, ignore_errors=True)


@starts("command")
@contextmanager
def session_root() -> Iterator[Path]:
    """A fresh absolute sessions root the target's user may create (its parent is 0777); afterwards the tmux
    server on its socket is stopped (its shells end with it) and the directory removed."""
    parent = Path(tempfile.mkdtemp(prefix="rogs-", dir="/tmp"))
    parent.chmod(0o777)
    root = parent / "sessions"
    try:
        yield root
    finally:
        if (root / "tmux.sock").exists():
            tmux_as_owner(root, "kill-server")
        shutil.rmtree(parent, ignore_errors=True)


@starts("command")
def exit_masters(control_dir: Path) -> None:
    """Stop the ControlMasters a gateway killed with -9 left in ``control_dir`` (a clean stop closes them)."""
    for sock in control_dir.iterdir():
        if sock.is_socket():
            subprocess.run(
                ["ssh", "-F", "/dev/null", "-S", str(sock), "-O", "exit", "rog-master"],
                capture_output=True,
                check=False,
                timeout=10,
            )


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
