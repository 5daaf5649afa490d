"""Helpers for the session tests: a private remote root in /tmp whose tmux server is stopped afterwards,
the sessions still alive on it (asked of tmux directly, as the target's user), and a RemoteSessions over
the real sshd."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from acceptance.harness.targets import exit_masters, session_root, tmux_as_owner, tmux_sessions
from remoteops import RemoteOps, RemoteSessions, SessionSettings, StateStore, TransportSettings

__all__ = [
    "exit_masters",
    "kill_remote_session",
    "running_sessions",
    "session_root",
    "tmux_as_owner",
    "tmux_sessions",
]


def kill_remote_session(root: Path, name: str) -> None:
    done = tmux_as_owner(root, "kill-session", "-t", f"={name}")
    assert done.returncode == 0, done.stderr


@asynccontextmanager
async def running_sessions(
    ops: RemoteOps, state_dir: Path, root: Path, transport: TransportSettings, **overrides: Any
) -> AsyncIterator[RemoteSessions]:
    settings = SessionSettings(remote_dir=str(root), width=80, height=24, **overrides)
    async with RemoteSessions(ops, StateStore(state_dir), settings, transport) as sessions:
        yield sessions
