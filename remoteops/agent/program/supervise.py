"""A call's supervisor: the small process the agent forks for each EXEC. It becomes a child subreaper,
starts the command in a new session and reaps everything below it, so every descendant of the command
(``setsid``, double fork, ``env -i``: nothing escapes a subreaper's tree) is a descendant of the supervisor
that the agent can find in ``/proc`` and kill. It tells the agent, one JSON line each on its status pipe:
{"pid"} once the command runs, {"failed": "os", errno, strerror, filename} or {"failed": "refused",
message} when it could not be started, {"exit": wait status} when the command ended. It exits when the
agent writes ``L`` on its control pipe (the call has answered: background processes a finished command
left are re-parented to the agent, as without a supervisor), and when the control pipe closes without
that (the agent is gone) it first SIGKILLs every descendant.

A supervisor can be forked ahead of its call (``_spare``): the agent keeps one spare while it is idle, so a
call's critical path holds one process creation (the command's) instead of two; the fork of a Python
process, with its copy-on-write faults, was most of a spaced call's time on the target. The spare is the
same process in every respect once it has its call: it only waits first, for the call's argv, cwd,
environment and whether stdin is wanted, on its spec pipe (marshal, then end of file; an end of file with
nothing before it — the agent retired it or is gone — ends it)."""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import select
import signal
import subprocess
import time
from typing import Any

from .codec import wire_text
from .procs import (
    _PR_SET_CHILD_SUBREAPER,
    _close_all,
    _descendants,
    _fork_with_pipes,
    _forked_child,
    _hand_over,
    _prctl,
    _proc_table,
)

__all__ = ["_spare", "_supervise"]

_ORPHAN_KILL_S = 2.0


def _report(fd: int, message: dict[str, Any]) -> None:
    blob = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    while blob:
        blob = blob[os.write(fd, blob) :]


def _kill_tree() -> None:
    """SIGKILL every descendant of this process until none is left (bounded), reaping as they end."""
    until = time.monotonic() + _ORPHAN_KILL_S
    while time.monotonic() < until:
        members = _descendants(os.getpid(), _proc_table())
        if not members:
            return
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap_all()
        time.sleep(0.01)


def _reap_all() -> list[tuple[int, int]]:
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))


def _supervise(
    ctrl: int, status: int, stdio: tuple[int, int, int], argv: list[bytes], cwd: bytes | None,
    env: dict[bytes, bytes], subreaper: bool,
) -> None:  # fmt: skip
    """The supervisor's life, in the forked child; never returns."""
    try:
        _forked_child((ctrl, status, *stdio))
        if subreaper:
            _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _run(ctrl, status, stdio, argv, cwd, env)
    except BaseException:  # noqa: S110 - the agent sees the supervisor end; nothing here may escape the fork
        pass
    finally:
        os._exit(0)


def _spare(spec: int, ctrl: int, status: int, stdio: tuple[int, int, int], subreaper: bool) -> None:
    """A supervisor forked before its call: waits for the call on ``spec``, then supervises it; never
    returns. ``stdio[0]`` is a stdin pipe, closed (stdin on /dev/null) when the call wants none."""
    try:
        _forked_child((spec, ctrl, status, *stdio))
        if subreaper:
            _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        blob = b""
        while True:
            chunk = os.read(spec, 65536)
            if not chunk:
                break
            blob += chunk
        os.close(spec)
        if not blob:
            return  # retired (or the agent is gone) before any call
        argv, cwd, env, wants_stdin = marshal.loads(blob)  # noqa: S302 - written by our parent, the agent
        if not wants_stdin:
            os.close(stdio[0])
            stdio = (-1, stdio[1], stdio[2])
        _run(ctrl, status, stdio, argv, cwd, env)
    except BaseException:  # noqa: S110 - the agent sees the supervisor end; nothing here may escape the fork
        pass
    finally:
        os._exit(0)


def _run(
    ctrl: int, status: int, stdio: tuple[int, int, int], argv: list[bytes], cwd: bytes | None,
    env: dict[bytes, bytes],
) -> None:  # fmt: skip
    """Start the command, report it, and watch it (the supervisor's work once it has its call)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=stdio[0] if stdio[0] >= 0 else subprocess.DEVNULL,
            stdout=stdio[1],
            stderr=stdio[2],
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        where = exc.filename
        name = wire_text(os.fsencode(where)) if isinstance(where, (bytes, str)) else None
        _report(status, {"failed": "os", "errno": exc.errno, "strerror": exc.strerror, "filename": name})
        return
    except (subprocess.SubprocessError, ValueError) as exc:
        _report(status, {"failed": "refused", "message": type(exc).__name__ + ": " + str(exc)[:200]})
        return
    for fd in stdio:
        if fd >= 0:
            os.close(fd)
    _report(status, {"pid": proc.pid})
    _watch(ctrl, status, wake_r, proc)


def _watch(ctrl: int, status: int, wake_r: int, proc: subprocess.Popen[bytes]) -> None:
    try:
        while True:
            ready = select.select([ctrl, wake_r], [], [])[0]
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
            for pid, wait_status in _reap_all():
                if pid == proc.pid:
                    proc.returncode = 0  # reaped here: Popen must never wait for this pid again
                    _report(status, {"exit": wait_status})
            if ctrl in ready and os.read(ctrl, 64):
                return  # "L": the call has answered; what is left is the agent's now
            if ctrl in ready:
                break  # EOF without "L": the agent is gone
    except OSError:  # the agent is gone (its end of the status pipe too)
        pass
    _kill_tree()


class _Spare:
    """The agent's side of a spare supervisor: its pid and the pipes its call will use. ``fork`` makes one;
    ``hand`` gives it a call (None: it could not take it — the caller forks a supervisor as before)."""

    def __init__(self, agent: Any, pid: int, fds: tuple[int, int, int, int, int, int]) -> None:
        self.agent = agent
        self.pid = pid
        self.fds: tuple[int, ...] = fds  # spec_w, ctrl_w, status_r, stdin_w, out_r, err_r

    @staticmethod
    def fork(agent: Any) -> _Spare | None:
        forked = _fork_with_pipes(6)
        if forked is None:
            return None
        pid, ends = forked
        spec_r, spec_w, ctrl_r, ctrl_w, status_r, status_w = ends[:6]
        stdin_r, stdin_w, out_r, out_w, err_r, err_w = ends[6:]
        if pid == 0:
            _spare(spec_r, ctrl_r, status_w, (stdin_r, out_w, err_w), agent.subreaper)
        for fd in (spec_r, ctrl_r, status_w, stdin_r, out_w, err_w):
            os.close(fd)
        os.set_blocking(spec_w, False)
        spare = _Spare(agent, pid, (spec_w, ctrl_w, status_r, stdin_w, out_r, err_r))
        agent.by_pid[pid] = spare
        return spare

    def hand(
        self, owner: Any, argv: list[bytes], cwd: bytes | None, env: dict[bytes, bytes], wants_stdin: bool
    ) -> tuple[int, int, int, int, int] | None:
        """Give the spare its call; the call's ``(ctrl_w, status_r, stdin_w or -1, out_r, err_r)``."""
        spec_w, ctrl_w, status_r, stdin_w, out_r, err_r = self.fds
        if not _hand_over(spec_w, marshal.dumps((argv, cwd, env, wants_stdin))):
            self.retire()  # what it read is no call: it ends without running anything
            return None
        self.fds = ()
        if not wants_stdin:
            os.close(stdin_w)
            stdin_w = -1
        self.agent.by_pid[self.pid] = owner
        return ctrl_w, status_r, stdin_w, out_r, err_r

    def retire(self) -> None:
        """Close its pipes: an unused spare reads the end of its spec and exits (the agent reaps it)."""
        fds, self.fds = self.fds, ()
        _close_all(fds)

    def reaped(self, status: int) -> None:
        """It died before it had a call."""
        self.retire()
        if self.agent.spare is self:
            self.agent.spare = None
