"""The agent's view of processes: the ``/proc`` table, a process tree's live members, and what every process
the agent forks (a call's supervisor, a file worker) does first."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

from .codec import wire_text

__all__ = [
    "_close_all",
    "_descendants",
    "_fork_with_pipes",
    "_forked_child",
    "_hand_over",
    "_marked",
    "_prctl",
    "_proc_table",
    "_process_argv",
]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_LIBC: list[Any] = []  # [libc] once loaded (ctypes); empty when this Python has no ctypes


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` through ctypes (loaded once, before any fork); False where unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        if not _LIBC:
            import ctypes

            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        return int(_LIBC[0].prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _proc_table() -> dict[int, tuple[int, bytes, int]]:
    """pid -> (ppid, state, pgid) of every process ``/proc`` shows."""
    table: dict[int, tuple[int, bytes, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3:
            table[int(name)] = (int(fields[1]), fields[0], int(fields[2]))
    return table


def _descendants(root: int, table: dict[int, tuple[int, bytes, int]]) -> list[int]:
    """Live (non-zombie) descendants of ``root`` in ``table``, ``root`` itself excluded; iterative."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = []
    todo = list(children.get(root, ()))
    seen = {root}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if table[pid][1] not in (b"Z", b"X"):
            found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _marked(marker: bytes, table: dict[int, tuple[int, bytes, int]]) -> list[int]:
    """Live descendants of this agent whose environment holds the exact entry ``ROG_CALL=<marker>``
    (nothing outside the agent's own tree, whatever its environment says)."""
    entry = b"\0ROG_CALL=" + marker + b"\0"
    found = []
    for pid in _descendants(os.getpid(), table):
        try:
            with open("/proc/" + str(pid) + "/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        if entry in b"\0" + environ:
            found.append(pid)
    return found


def _process_argv(pid: int) -> list[str]:
    """A process's argv as protocol text (empty when it cannot be read)."""
    try:
        with open("/proc/" + str(pid) + "/cmdline", "rb") as fh:
            words = fh.read().split(b"\0")
    except OSError:
        return []
    if words and words[-1] == b"":
        words.pop()
    return [wire_text(word) for word in words]


def _forked_child(keep: tuple[int, ...]) -> None:
    """First steps of every process the agent forks: default signal dispositions, no wakeup fd, fds 0,
    1 and 2 on /dev/null (never the agent's channel: the gateway must see EOF when the agent is gone) and
    every other inherited descriptor closed but ``keep`` (another call's stdin pipe held open here would
    keep that command from ever seeing EOF)."""
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 4096))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _hand_over(fd: int, blob: bytes) -> bool:
    """Write ``blob`` whole to a spare's non-blocking pipe and close it; False (pipe left open) when it
    did not all fit or the spare is gone: the caller retires the spare and forks as before."""
    try:
        written = os.write(fd, blob)  # a spare reads at once; what is too big for the pipe forks
    except OSError:
        return False
    if written != len(blob):
        return False
    os.close(fd)
    return True


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _fork_with_pipes(count: int) -> tuple[int, list[int]] | None:
    """``count`` pipes (read, write, read, write, …) and a fork: ``(pid, ends)`` in both processes, or None
    (nothing left open) when a pipe or the fork failed."""
    ends: list[int] = []
    try:
        for _ in range(count):
            ends += os.pipe()
        return os.fork(), ends
    except OSError:
        _close_all(tuple(ends))
        return None
