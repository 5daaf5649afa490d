"""EXEC on the agent's side: the request's pipes, its supervisor (``supervise``), its time limit, the kill
and its confirmation in ``/proc``, and the RESULT."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import time
from typing import Any

from .codec import ERROR, RESULT, STARTED, encode, wire_bytes, wire_text
from .procs import _descendants, _marked, _proc_table, _process_argv
from .supervise import _supervise

__all__ = ["_Exec"]

_CHUNK = 256 * 1024
_DRAIN_AFTER_EXIT_S = 2.0  # a background process may hold the output pipes after the command exited
_CONFIRM_EVERY_S = 0.02  # SIGKILL is asynchronous: re-check the process table this often
_CONFIRM_FOR_S = 2.0


class _Capture:
    """Head and tail of a stream, bounded; counts every byte."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_cap = head
        self.tail_cap = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def parts(self) -> tuple[bytes, bytes]:
        tail = bytes(self.tail[-self.tail_cap :]) if self.tail_cap else b""
        return bytes(self.head), tail


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name[3:]
    except ValueError:
        return None


class _Exec:
    def __init__(self, agent: Any, request_id: int, meta: dict[str, Any]) -> None:
        self.agent = agent
        self.id = request_id
        self.argv = [wire_bytes(word) for word in meta["argv"]]
        if not self.argv or not self.argv[0]:
            raise ValueError("argv must be non-empty")
        cwd = meta.get("cwd")
        self.cwd = wire_bytes(cwd) if cwd else None
        self.marker = str(meta["marker"]).encode()
        if len(self.marker) < 16 or self.marker.strip(b"0123456789abcdef"):
            raise ValueError("marker must be at least 16 lowercase hex digits")
        self.limit_s = float(meta["limit_s"])
        self.kill_s = float(meta.get("kill_s", 5))
        self.out = _Capture(int(meta.get("head", 32768)), int(meta.get("tail", 32768)))
        self.err = _Capture(int(meta.get("head", 32768)), int(meta.get("tail", 32768)))
        self.env = dict(agent.base_env)
        for name, value in meta.get("env", {}).items():
            self.env[wire_bytes(name)] = wire_bytes(value)
        self.env[b"ROG_CALL"] = self.marker
        self.wants_stdin = bool(meta.get("stdin"))
        self.stdin_buf = bytearray()
        self.stdin_end = not self.wants_stdin
        self.stdin_fd: int | None = None
        self.pipes: dict[int, _Capture] = {}
        self.status_fd: int | None = None
        self.status_buf = b""
        self.ctrl_fd: int | None = None
        self.timers: list[list[Any]] = []
        self.sup = 0  # the supervisor's pid, while it is alive (the agent reaps it: never reused meanwhile)
        self.pid = 0  # the command's
        self.status: int | None = None
        self.started = time.monotonic()
        self.timed_out = False
        self.cancelled = False
        self.stage = 0  # 1: SIGTERM sent, 2: SIGKILL sent
        self.confirm_until = 0.0
        self.checking = False
        self.finished = False

    # -- start -------------------------------------------------------------------------------------------
    def start(self) -> None:
        spare = self.agent.take_spare()
        handed = spare.hand(self, self.argv, self.cwd, self.env, self.wants_stdin) if spare else None
        if spare is not None and handed is not None:
            self._running(spare.pid, *handed)
            return
        ends: list[int] = []
        try:
            stdin_r, stdin_w = os.pipe() if self.wants_stdin else (-1, -1)
            ends += [fd for fd in (stdin_r, stdin_w) if fd >= 0]
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            ctrl_r, ctrl_w = os.pipe()
            status_r, status_w = os.pipe()
            ends += [out_r, out_w, err_r, err_w, ctrl_r, ctrl_w, status_r, status_w]
            pid = os.fork()
        except OSError as exc:
            for fd in ends:
                os.close(fd)
            self._refuse("cannot start the command: " + (exc.strerror or type(exc).__name__))
            return
        if pid == 0:
            _supervise(ctrl_r, status_w, (stdin_r, out_w, err_w), self.argv, self.cwd, self.env,
                       self.agent.subreaper)  # fmt: skip
        for fd in (stdin_r, out_w, err_w, ctrl_r, status_w):
            if fd >= 0:
                os.close(fd)
        self.agent.by_pid[pid] = self
        self._running(pid, ctrl_w, status_r, stdin_w, out_r, err_r)

    def _running(self, pid: int, ctrl_w: int, status_r: int, stdin_w: int, out_r: int, err_r: int) -> None:
        """The supervisor ``pid`` has the call: watch its pipes, feed its stdin, start the time limit."""
        self.sup = pid
        self.ctrl_fd = ctrl_w
        self.status_fd = status_r
        for fd, capture in ((out_r, self.out), (err_r, self.err)):
            os.set_blocking(fd, False)
            self.pipes[fd] = capture
            self.agent.sel.register(fd, selectors.EVENT_READ, self._readable)
        os.set_blocking(status_r, False)
        self.agent.sel.register(status_r, selectors.EVENT_READ, self._status_readable)
        if stdin_w >= 0:
            self.stdin_fd = stdin_w
            os.set_blocking(stdin_w, False)
            self._want_write()
        self.timers.append(self.agent.later(self.limit_s, self._limit))

    def _status_readable(self, fd: int, mask: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._status_chunk(chunk)

    def _status_chunk(self, chunk: bytes) -> None:
        if not chunk:
            self._close_status()
            return
        self.status_buf += chunk
        while b"\n" in self.status_buf and not self.finished:
            line, self.status_buf = self.status_buf.split(b"\n", 1)
            self._supervisor_says(json.loads(line))

    def _supervisor_says(self, message: dict[str, Any]) -> None:
        if "pid" in message:
            self.pid = int(message["pid"])
            self.agent.send(encode(self.id, STARTED, {"pid": self.pid}))
        elif message.get("failed") == "os":
            exc = OSError(int(message.get("errno") or 0), str(message.get("strerror") or "cannot start"))
            if message.get("filename") is not None:
                exc.filename = wire_bytes(str(message["filename"]))
            self._spawn_failed(exc)
        elif "failed" in message:
            self._refuse("cannot start the command: " + str(message.get("message")))
        elif "exit" in message:
            self.exited(int(message["exit"]))

    def _close_status(self) -> None:
        fd, self.status_fd = self.status_fd, None
        if fd is not None:
            self.agent.sel.unregister(fd)
            os.close(fd)

    def reaped(self, status: int) -> None:
        """The agent reaped the supervisor: what it said before is read first; a supervisor that died
        before it reported the command's end leaves its own status as the command's."""
        self.sup = 0
        fd = self.status_fd
        while fd is not None and self.status_fd == fd and not self.finished:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            self._status_chunk(chunk)
        if not self.finished and self.status is None:
            self.exited(status)

    def _spawn_failed(self, exc: OSError) -> None:
        name = wire_text(self.argv[0])
        where = exc.filename
        if self.cwd is not None and where is not None and os.fsencode(where) == self.cwd:
            code, text = 2, f"rog: cd: {wire_text(self.cwd)}: {exc.strerror}"
        elif exc.errno in (errno.ENOENT, errno.ENOTDIR) and b"/" not in self.argv[0]:
            code, text = 127, f"rog: {name}: command not found"
        elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
            code, text = 127, f"rog: {name}: {exc.strerror}"
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.ENOEXEC, errno.EISDIR):
            code, text = 126, f"rog: {name}: {exc.strerror}"
        else:  # no fds, no memory, ...: the target is in trouble, the command is not at fault
            self._refuse(f"cannot start the command: {exc.strerror or exc!r}")
            return
        self.err.feed(text.encode("utf-8", "surrogateescape") + b"\n")
        self.status = code << 8
        self.finish(spawned=False)

    def _refuse(self, message: str) -> None:
        """End the request with ERROR (nothing ran)."""
        self._release()
        self.agent.send(encode(self.id, ERROR, {"code": "spawn_failed", "message": message}))

    # -- io ----------------------------------------------------------------------------------------------
    def _readable(self, fd: int, mask: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.pipes[fd].feed(data)
            return
        self._close_pipe(fd)
        self.check()

    def _close_pipe(self, fd: int) -> None:
        if self.pipes.pop(fd, None) is not None:
            self.agent.sel.unregister(fd)
            os.close(fd)

    def _want_write(self) -> None:
        fd = self.stdin_fd
        if fd is None:
            return
        if not self.stdin_buf and self.stdin_end:
            self._close_stdin()
            return
        if self.stdin_buf:
            with contextlib.suppress(KeyError):  # already registered
                self.agent.sel.register(fd, selectors.EVENT_WRITE, self._writable)

    def _writable(self, fd: int, mask: int) -> None:
        try:
            written = os.write(fd, self.stdin_buf[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the command does not read (all of) its stdin
            self.stdin_buf = bytearray()
            self.stdin_end = True
            self._close_stdin()
            return
        del self.stdin_buf[:written]
        if not self.stdin_buf:
            self.agent.sel.unregister(fd)
            if self.stdin_end:
                self._close_stdin()

    def _close_stdin(self) -> None:
        fd, self.stdin_fd = self.stdin_fd, None
        if fd is None:
            return
        with contextlib.suppress(KeyError):
            self.agent.sel.unregister(fd)
        os.close(fd)

    def data(self, chunk: bytes, end: bool) -> None:
        if self.stdin_fd is None:
            return
        self.stdin_buf += chunk
        self.stdin_end = self.stdin_end or end
        self._want_write()

    # -- life --------------------------------------------------------------------------------------------
    def exited(self, status: int) -> None:
        self.status = status
        self._close_stdin()
        if self.pipes:
            self.timers.append(self.agent.later(_DRAIN_AFTER_EXIT_S, self._drain_timeout))
        self.check()

    def _drain_timeout(self) -> None:
        for fd in list(self.pipes):
            self._close_pipe(fd)
        self.check()

    def _limit(self) -> None:
        if self.status is None and not self.finished:
            self.timed_out = True
            self.kill(self.kill_s)

    def kill(self, grace_s: float) -> None:
        if self.finished or self.stage:
            return
        self.stage = 1
        self._signal(signal.SIGTERM, self._members())
        self.timers.append(self.agent.later(grace_s, self._escalate))
        self.check()

    def _escalate(self) -> None:
        if self.finished:
            return
        self.stage = 2
        self.confirm_until = time.monotonic() + _CONFIRM_FOR_S
        self._signal(signal.SIGKILL, self._members())
        self.check()

    def _members(self) -> list[int]:
        """Every live process of this call: the supervisor's descendants (all of them: it is a subreaper)
        and, wherever they went, the agent's descendants that hold the call's marker."""
        table = _proc_table()
        found = set(_marked(self.marker, table))
        if self.sup:
            found.update(_descendants(self.sup, table))
        return sorted(found)

    def _signal(self, sig: int, members: list[int]) -> None:
        if self.pid and self.status is None:  # unreaped leader: its pid (= the pgid) cannot be reused
            with contextlib.suppress(OSError):
                os.killpg(self.pid, sig)
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def check(self) -> None:
        """Finish once the command exited and its pipes closed; after a kill, once nothing of it is left,
        or when the confirmation time is over (naming what is left)."""
        self.checking = False
        if self.finished:
            return
        if not self.stage:
            if self.status is not None and not self.pipes:
                self.finish()
            return
        survivors = self._members()
        if self.status is not None and not self.pipes and not survivors:
            self.finish(killed=True)
        elif self.stage == 2 and time.monotonic() >= self.confirm_until:
            self.finish(survivors=survivors or ([self.pid] if self.status is None and self.pid else []))
        elif self.stage == 2:
            self._signal(signal.SIGKILL, survivors)  # forked since the last round
            if not self.checking:
                self.checking = True
                self.timers.append(self.agent.later(_CONFIRM_EVERY_S, self.check))

    def _release(self) -> None:
        """Close every descriptor of the request and let its supervisor go."""
        self.finished = True
        self.agent.execs.pop(self.id, None)
        for timer in self.timers:
            timer[2] = None  # cancelled: the heap entry no longer holds this request
        for fd in list(self.pipes):
            self._close_pipe(fd)
        self._close_stdin()
        self._close_status()
        ctrl, self.ctrl_fd = self.ctrl_fd, None
        if ctrl is not None:
            with contextlib.suppress(OSError):
                os.write(ctrl, b"L")
            os.close(ctrl)

    def finish(
        self, *, spawned: bool = True, killed: bool = False, survivors: list[int] | None = None
    ) -> None:
        if self.finished:
            return
        procs = [{"pid": pid, "argv": _process_argv(pid)} for pid in survivors or []]
        self._release()
        status = self.status or 0
        signal_number = None
        if self.timed_out:
            code = 137 if self.stage == 2 else 124
        elif os.WIFSIGNALED(status):
            signal_number = os.WTERMSIG(status)
            code = 128 + signal_number
        else:
            code = os.WEXITSTATUS(status)
        out_head, out_tail = self.out.parts()
        err_head, err_tail = self.err.parts()
        meta = {
            "exit": code,
            "signal": _signal_name(signal_number) if signal_number else None,
            "spawned": spawned,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "killed": killed,
            "survivors": survivors or [],
            "survivor_procs": procs,
            "duration_s": round(time.monotonic() - self.started, 6),
            "out": [len(out_head), len(out_tail), self.out.total],
            "err": [len(err_head), len(err_tail), self.err.total],
        }
        self.agent.send(encode(self.id, RESULT, meta, out_head + out_tail + err_head + err_tail))
        self.out = self.err = _Capture(0, 0)
        self.agent.later(0, self.agent.refill)  # the next call's supervisor, forked after this answer
