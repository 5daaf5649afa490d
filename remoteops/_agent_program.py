"""rog-agent: the program remoteops runs on a target, over one long-lived SSH session, to carry requests.

Target side: **stdlib only, Python >= 3.8** (no 3.9+ syntax or APIs; annotations are never evaluated).
Nothing is installed: the gateway starts ``python3 -I -S -c LOADER SIZE SHA256`` (see ``_agent_boot``), writes
this file's bytes on the session's stdin, and the loader checks their SHA-256 and runs them. The agent then
speaks the framed protocol below on stdin/stdout, never opens a socket, reads nothing but its frames, and
exits when its stdin closes (or stdout breaks, or it gets SIGTERM/SIGHUP) after killing what it started.
The gateway imports this module too, for the frame codec and the constants (one source of truth).

Framing (big-endian)::

    header  u32 body_length | u32 request_id | u8 kind | u8 flags        (10 bytes)
    body    u32 meta_length | meta (UTF-8 JSON object, or empty) | data (raw bytes, the rest)

Binary payloads (stdin, output, file contents) are raw bytes in ``data``, never base64 inside JSON. Text
fields that may hold arbitrary bytes (argv, paths, env) travel as strings decoded from UTF-8 with
``surrogateescape`` (:func:`wire_text`): JSON escapes the surrogates and :func:`wire_bytes` restores the
exact bytes on the other side, whatever the target's locale (the ssh carrier sends UTF-8 too). Request ids
are chosen by the gateway (0 is the channel itself); any number of requests may be in flight, answers come
in any order.
Every request ends with exactly one final frame (RESULT or ERROR); non-final frames (STARTED, OUTPUT,
PROGRESS) may precede it.

Kinds, gateway → agent:

* ``HELLO`` {min, max}: version negotiation, must come first → HELLO {version, pid, python, kinds} or
  ERROR {code: "version"} (then the agent exits) — a mismatch is an answer, never a hang.
* ``EXEC`` {argv, cwd?, env, marker, limit_s, kill_s, head, tail, stdin}: run argv in a new session with
  ``ROG_CALL=<marker>`` added to its environment; stdin follows in DATA frames when ``stdin`` is true.
  → STARTED {pid}, then RESULT {exit, signal, timed_out, killed, cancelled, survivors, duration_s, out, err}
  with data = stdout head + tail + stderr head + tail (``out``/``err`` = [head_len, tail_len, total]).
  At ``limit_s`` the process group *and* every process whose environment holds the marker (descendants
  that left the group: ``setsid``, double fork) get SIGTERM, ``kill_s`` later SIGKILL; ``killed`` is true
  only when none of them is left (checked in ``/proc``). Exit status mirrors coreutils ``timeout``: 124
  when SIGTERM ended it, 137 when SIGKILL was needed. A program that cannot be started is exit 127
  (not found) or 126 (not executable) with a plain message on stderr; an unusable ``cwd`` is exit 2.
* ``DATA`` (flag END on the last): a chunk of the request's input stream (exec stdin; write contents next).
* ``CANCEL`` {grace_s}: kill request ``id``'s processes like a time limit (TERM, KILL after grace_s); the
  request then ends with its RESULT (``cancelled`` true).
* Reserved for streaming (issue 12): EXEC ``{..., stream: true}`` asks for the output as it arrives in
  OUTPUT frames ``{stream: 1 | 2, offset}`` (offset = bytes of that stream before the chunk, END on each
  stream's last; the RESULT then carries only the totals), paced by ``CREDIT`` ``{bytes}`` frames from the
  gateway so a slow consumer never makes the agent buffer without bound.
* Reserved for the file primitives (issue 11): ``STAT`` {path}, ``READ`` {path, offset, length},
  ``WRITE`` {path, mode?, expected_sha256?, if_exists} + DATA frames (temporary file, fsync, rename),
  ``HASH`` {path}, ``LIST`` {path, depth, limit}. Reserved for server-side waits (issue 12): ``WAIT``
  {pid | path | pattern, until} answered when the condition holds or its bound passes. Today an agent
  answers them with ERROR {code: "unsupported"}, so a newer gateway can tell what an older agent lacks.

Kinds, agent → gateway: ``RESULT`` and ``ERROR`` {code, message} (final), ``STARTED``, and reserved
``OUTPUT`` {stream, offset} (a chunk of a process's output as it arrives; END on the last) and
``PROGRESS`` {done, total} for streaming output and long transfers.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "CANCEL",
    "CREDIT",
    "DATA",
    "ERROR",
    "EXEC",
    "F_END",
    "HASH",
    "HEADER",
    "HELLO",
    "LIST",
    "MAX_BODY",
    "OUTPUT",
    "PROGRESS",
    "PROTOCOL_MAX",
    "PROTOCOL_MIN",
    "READ",
    "RESULT",
    "STARTED",
    "STAT",
    "WAIT",
    "WRITE",
    "FrameReader",
    "encode",
    "wire_bytes",
    "wire_text",
]

PROTOCOL_MIN = 1
PROTOCOL_MAX = 1

HEADER = struct.Struct(">IIBB")
_META = struct.Struct(">I")
MAX_BODY = 64 * 1024 * 1024

HELLO = 0x01
EXEC = 0x02
DATA = 0x03
CANCEL = 0x04
CREDIT = 0x05
STAT = 0x10
READ = 0x11
WRITE = 0x12
HASH = 0x13
LIST = 0x14
WAIT = 0x18
RESULT = 0x80
ERROR = 0x81
STARTED = 0x82
OUTPUT = 0x83
PROGRESS = 0x84

F_END = 0x01

_CHUNK = 256 * 1024
_DRAIN_AFTER_EXIT_S = 2.0  # a background process may hold the output pipes after the command exited
_CONFIRM_EVERY_S = 0.02  # SIGKILL is asynchronous: re-check the process table this often
_CONFIRM_FOR_S = 2.0
_SHUTDOWN_GRACE_S = 1.0
_PR_SET_CHILD_SUBREAPER = 36


def wire_bytes(text: str) -> bytes:
    """A text field of the protocol as the bytes it stands for."""
    return text.encode("utf-8", "surrogateescape")


def wire_text(data: bytes) -> str:
    """Bytes (a path, an argv word) as a text field of the protocol; :func:`wire_bytes` inverts it."""
    return data.decode("utf-8", "surrogateescape")


def encode(
    request_id: int, kind: int, meta: dict[str, Any] | None = None, data: bytes = b"", flags: int = 0
) -> bytes:
    """One frame as bytes."""
    blob = json.dumps(meta, separators=(",", ":")).encode() if meta is not None else b""
    body_length = _META.size + len(blob) + len(data)
    if body_length > MAX_BODY:
        raise ValueError("frame too large")
    return HEADER.pack(body_length, request_id, kind, flags) + _META.pack(len(blob)) + blob + data


class FrameReader:
    """Incremental decoder: ``feed(bytes)`` returns the complete frames as (id, kind, flags, meta, data)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, int, int, dict[str, Any] | None, bytes]]:
        self._buf += chunk
        frames = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= HEADER.size:
            body_length, request_id, kind, flags = HEADER.unpack_from(buf, pos)
            if body_length < _META.size or body_length > MAX_BODY:
                raise ValueError(f"bad frame length {body_length}")
            end = pos + HEADER.size + body_length
            if len(buf) < end:
                break
            start = pos + HEADER.size
            (meta_length,) = _META.unpack_from(buf, start)
            if meta_length > body_length - _META.size:
                raise ValueError(f"bad meta length {meta_length}")
            meta_end = start + _META.size + meta_length
            meta = json.loads(bytes(buf[start + _META.size : meta_end])) if meta_length else None
            if meta is not None and not isinstance(meta, dict):
                raise ValueError("meta is not an object")
            frames.append((request_id, kind, flags, meta, bytes(buf[meta_end:end])))
            pos = end
        if pos:
            del buf[:pos]
        return frames


# ------------------------------------------------------------------------------------------- the agent


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


def _members(pgid: int, marker: bytes) -> list[int]:
    """Live (non-zombie) *descendants of this agent* that are in group ``pgid`` or whose environment holds
    the exact entry ``ROG_CALL=<marker>``. Only descendants: the agent is a child subreaper, so orphans of a
    command (``setsid``, double fork) are re-parented to it and stay in its tree; nothing outside its own
    tree is ever signalled, whatever its environment says."""
    me = os.getpid()
    entry = b"\0ROG_CALL=" + marker + b"\0"
    parents: dict[int, int] = {}
    candidates: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 3:
            continue
        parents[pid] = int(fields[1])
        if pid == me or fields[0] in (b"Z", b"X"):
            continue
        if int(fields[2]) == pgid:
            candidates.append(pid)
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        if entry in b"\0" + environ:
            candidates.append(pid)
    found = []
    for pid in candidates:
        seen = 0
        parent = parents.get(pid, 0)
        while parent not in (0, 1, me) and seen < 4096:
            parent = parents.get(parent, 0)
            seen += 1
        if parent == me:
            found.append(pid)
    return found


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name[3:]
    except ValueError:
        return None


class _Exec:
    def __init__(self, agent: _Agent, request_id: int, meta: dict[str, Any]) -> None:
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
        self.files: dict[int, Any] = {}  # fd -> the pipe's file object (it owns the fd)
        self.pipes: dict[int, _Capture] = {}
        self.timers: list[list[Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.status: int | None = None
        self.started = time.monotonic()
        self.timed_out = False
        self.cancelled = False
        self.stage = 0  # 1: SIGTERM sent, 2: SIGKILL sent
        self.confirm_until = 0.0
        self.finished = False

    # -- start -------------------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE if self.wants_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._spawn_failed(exc)
            return
        except (subprocess.SubprocessError, ValueError) as exc:
            self._refuse(f"cannot start the command: {exc!r}")
            return
        self.pid = self.proc.pid
        self.agent.by_pid[self.pid] = self
        self.agent.send(encode(self.id, STARTED, {"pid": self.pid}))
        for stream, capture in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            if stream is not None:
                fd = stream.fileno()
                os.set_blocking(fd, False)
                self.files[fd] = stream
                self.pipes[fd] = capture
                self.agent.sel.register(fd, selectors.EVENT_READ, self._readable)
        if self.proc.stdin is not None:
            self.stdin_fd = fd = self.proc.stdin.fileno()
            self.files[fd] = self.proc.stdin
            os.set_blocking(fd, False)
            self._want_write()
        self.timers.append(self.agent.later(self.limit_s, self._limit))

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
        self.finished = True
        self.agent.execs.pop(self.id, None)
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
            self.files.pop(fd).close()

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
        self.files.pop(fd).close()

    def data(self, chunk: bytes, end: bool) -> None:
        if self.stdin_fd is None:
            return
        self.stdin_buf += chunk
        self.stdin_end = self.stdin_end or end
        self._want_write()

    # -- life --------------------------------------------------------------------------------------------
    def exited(self, status: int) -> None:
        self.status = status
        if self.proc is not None:
            self.proc.returncode = 0  # reaped by the agent: Popen must never wait for this pid again
        self.agent.by_pid.pop(self.pid, None)
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
        self._signal(signal.SIGTERM)
        self.timers.append(self.agent.later(grace_s, self._escalate))
        self.check()

    def _escalate(self) -> None:
        if self.finished:
            return
        self.stage = 2
        self._signal(signal.SIGKILL)
        self.confirm_until = time.monotonic() + _CONFIRM_FOR_S
        self.check()

    def _signal(self, sig: int) -> None:
        if self.pid and self.status is None:  # unreaped leader: its pid (= the pgid) cannot be reused
            with contextlib.suppress(OSError):
                os.killpg(self.pid, sig)
        for pid in _members(self.pid, self.marker):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def check(self) -> None:
        """Finish once the command exited and its pipes closed; after a kill, once nothing of it is left."""
        if self.finished or self.status is None or self.pipes:
            return
        if not self.stage:
            self.finish()
            return
        survivors = _members(self.pid, self.marker)
        if not survivors:
            self.finish(killed=True)
        elif self.stage == 2:
            if time.monotonic() >= self.confirm_until:
                self.finish(survivors=survivors)
            else:
                self.timers.append(self.agent.later(_CONFIRM_EVERY_S, self.check))

    def finish(
        self, *, spawned: bool = True, killed: bool = False, survivors: list[int] | None = None
    ) -> None:
        if self.finished:
            return
        self.finished = True
        self.agent.execs.pop(self.id, None)
        for timer in self.timers:
            timer[2] = None  # cancelled: the heap entry no longer holds this request
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
            "duration_s": round(time.monotonic() - self.started, 6),
            "out": [len(out_head), len(out_tail), self.out.total],
            "err": [len(err_head), len(err_tail), self.err.total],
        }
        self.agent.send(encode(self.id, RESULT, meta, out_head + out_tail + err_head + err_tail))
        self.out = self.err = _Capture(0, 0)


class _Agent:
    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.reader = FrameReader()
        self.out = bytearray()
        self.execs: dict[int, _Exec] = {}
        self.by_pid: dict[int, _Exec] = {}
        self.timers: list[list[Any]] = []  # heap of [deadline, seq, callback or None when cancelled]
        self.seq = 0
        self.version = 0
        self.closing = False
        self.exit_at = 0.0
        self.signals: set[int] = set()
        self.base_env = dict(os.environb)
        self.subreaper = self._become_subreaper()

    @staticmethod
    def _become_subreaper() -> bool:
        """Orphaned descendants (double fork) are re-parented to us: reaped, and still found by marker."""
        if not sys.platform.startswith("linux"):
            return False
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
        except (OSError, AttributeError, ImportError):
            return False

    # -- plumbing ----------------------------------------------------------------------------------------
    def later(self, delay_s: float, callback: Callable[[], None]) -> list[Any]:
        self.seq += 1
        timer = [time.monotonic() + delay_s, self.seq, callback]
        heapq.heappush(self.timers, timer)
        return timer

    def send(self, frame: bytes) -> None:
        pending = bool(self.out)
        self.out += frame
        if not pending:
            self._flush(1, 0)

    def _flush(self, fd: int, mask: int) -> None:
        while self.out:
            try:
                written = os.write(1, self.out[:_CHUNK])
            except BlockingIOError:
                break
            except OSError:  # the gateway side is gone
                self.out = bytearray()
                self.shutdown()
                return
            del self.out[:written]
        registered = 1 in self.sel.get_map()
        if self.out and not registered:
            self.sel.register(1, selectors.EVENT_WRITE, self._flush)
        elif not self.out and registered:
            self.sel.unregister(1)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.add(signum)

    def _wakeup(self, fd: int, mask: int) -> None:
        with contextlib.suppress(OSError):
            os.read(fd, 4096)

    def _handle_signals(self) -> None:
        pending, self.signals = self.signals, set()
        if signal.SIGCHLD in pending:
            self._reap()
        if pending & {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}:
            self.shutdown()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.by_pid.get(pid)
            if child is not None:
                child.exited(status)

    # -- frames ------------------------------------------------------------------------------------------
    def _stdin(self, fd: int, mask: int) -> None:
        try:
            chunk = os.read(0, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(0)
            self.shutdown()
            return
        try:
            frames = self.reader.feed(chunk)
        except ValueError as exc:
            self.send(encode(0, ERROR, {"code": "protocol", "message": str(exc)}))
            self.sel.unregister(0)
            self.shutdown()
            return
        for request_id, kind, flags, meta, data in frames:
            self._dispatch(request_id, kind, flags, meta or {}, data)

    def _dispatch(self, request_id: int, kind: int, flags: int, meta: dict[str, Any], data: bytes) -> None:
        if self.closing:
            return
        if kind == HELLO:
            self._hello(request_id, meta)
            return
        if not self.version:
            self.send(encode(request_id, ERROR, {"code": "hello_first", "message": "HELLO comes first"}))
            return
        if kind == DATA:
            child = self.execs.get(request_id)
            if child is not None:
                child.data(data, bool(flags & F_END))
            return
        if kind == CREDIT:
            return  # streaming is not built yet: nothing to pace (never an answer: it is not a request)
        if kind == CANCEL:
            child = self.execs.get(request_id)
            if child is not None and not child.finished:
                child.cancelled = True
                child.kill(float(meta.get("grace_s", 1.0)))
            return
        if kind != EXEC:
            message = f"request kind 0x{kind:02x} is not supported by this agent"
            self.send(encode(request_id, ERROR, {"code": "unsupported", "message": message}))
            return
        if request_id in self.execs:
            self.send(encode(request_id, ERROR, {"code": "bad_request", "message": "request id in use"}))
            return
        try:
            child = _Exec(self, request_id, meta)
        except (KeyError, TypeError, ValueError) as exc:
            self.send(encode(request_id, ERROR, {"code": "bad_request", "message": repr(exc)}))
            return
        self.execs[request_id] = child
        child.start()

    def _hello(self, request_id: int, meta: dict[str, Any]) -> None:
        low, high = int(meta.get("min", 0)), int(meta.get("max", 0))
        version = min(high, PROTOCOL_MAX)
        if version < max(low, PROTOCOL_MIN):
            message = f"the gateway speaks protocol {low}..{high}, this agent {PROTOCOL_MIN}..{PROTOCOL_MAX}"
            self.send(encode(request_id, ERROR, {"code": "version", "message": message}))
            self.shutdown()
            return
        self.version = version
        info = {
            "version": version,
            "pid": os.getpid(),
            "python": ".".join(str(part) for part in sys.version_info[:3]),
            "subreaper": self.subreaper,
            "kinds": [HELLO, EXEC, DATA, CANCEL],
        }
        self.send(encode(request_id, HELLO, info))

    # -- life --------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stdin closed, stdout broken or asked to stop: kill everything started, then exit (bounded)."""
        if self.closing:
            return
        self.closing = True
        self.exit_at = time.monotonic() + _SHUTDOWN_GRACE_S + _CONFIRM_FOR_S
        for child in list(self.execs.values()):
            child.cancelled = True
            child.kill(_SHUTDOWN_GRACE_S)

    def run(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        os.set_blocking(0, False)
        os.set_blocking(1, False)
        self.sel.register(wake_r, selectors.EVENT_READ, self._wakeup)
        self.sel.register(0, selectors.EVENT_READ, self._stdin)
        while True:
            if self.closing and (not self.execs or time.monotonic() >= self.exit_at):
                break
            timeout = None
            if self.timers:
                timeout = max(0.0, self.timers[0][0] - time.monotonic())
            if self.closing:
                timeout = min(
                    timeout if timeout is not None else 1.0, max(0.0, self.exit_at - time.monotonic())
                )
            for key, mask in self.sel.select(timeout):
                key.data(key.fd, mask)
            self._handle_signals()
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                callback = heapq.heappop(self.timers)[2]
                if callback is not None:
                    callback()
            self._handle_signals()
        if self.out:
            os.set_blocking(1, True)
            with contextlib.suppress(OSError):
                os.write(1, bytes(self.out))


def main() -> None:
    _Agent().run()
    os._exit(0)


if __name__ == "__rog_agent__":
    main()
