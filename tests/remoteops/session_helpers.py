"""Helpers for the session tests: a private remote root in /tmp whose tmux server is stopped afterwards,
the sessions still alive on it (asked of tmux directly, as the target's user), and a RemoteSessions over
the real sshd."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from remoteops import RemoteOps, RemoteSessions, SessionSettings, StateStore, TransportSettings

__all__ = [
    "exit_masters",
    "kill_remote_session",
    "running_sessions",
    "session_root",
    "tmux_as_owner",
    "tmux_sessions",
]


def tmux_as_owner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run tmux on the root's socket as the user who owns it (the target's user)."""
    sock = root / "tmux.sock"
    owner = sock.stat().st_uid
    return subprocess.run(
        ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups", "tmux", "-S", str(sock), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )


def tmux_sessions(root: Path) -> list[str]:
    """Names of the sessions alive on the root's tmux server (none when it is not running)."""
    if not (root / "tmux.sock").exists():
        return []
    out = tmux_as_owner(root, "list-sessions", "-F", "#{session_name}")
    return out.stdout.split() if out.returncode == 0 else []


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


def kill_remote_session(root: Path, name: str) -> None:
    done = tmux_as_owner(root, "kill-session", "-t", f"={name}")
    assert done.returncode == 0, done.stderr


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


@asynccontextmanager
async def running_sessions(
    ops: RemoteOps, state_dir: Path, root: Path, transport: TransportSettings, **overrides: Any
) -> AsyncIterator[RemoteSessions]:
    settings = SessionSettings(remote_dir=str(root), width=80, height=24, **overrides)
    async with RemoteSessions(ops, StateStore(state_dir), settings, transport) as sessions:
        yield sessions
