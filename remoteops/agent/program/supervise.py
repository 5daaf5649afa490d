"""A call's supervisor: the small process the agent forks for each EXEC. It becomes a child subreaper,
starts the command in a new session and reaps everything below it, so every descendant of the command
(``setsid``, double fork, ``env -i``: nothing escapes a subreaper's tree) is a descendant of the supervisor
that the agent can find in ``/proc`` and kill. It tells the agent, one JSON line each on its status pipe:
{"pid"} once the command runs, {"failed": "os", errno, strerror, filename} or {"failed": "refused",
message} when it could not be started, {"exit": wait status} when the command ended. It exits when the
agent writes ``L`` on its control pipe (the call has answered: background processes a finished command
left are re-parented to the agent, as without a supervisor), and when the control pipe closes without
that (the agent is gone) it first SIGKILLs every descendant."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from typing import Any

from .codec import wire_text
from .procs import _PR_SET_CHILD_SUBREAPER, _descendants, _forked_child, _prctl, _proc_table

__all__ = ["_supervise"]

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
    except BaseException:  # noqa: S110 - the agent sees the supervisor end; nothing here may escape the fork
        pass
    finally:
        os._exit(0)


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
