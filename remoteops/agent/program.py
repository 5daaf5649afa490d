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

* ``HELLO`` {min, max}: version negotiation, must come first → HELLO {version, pid, uid, python, kinds} or
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
* File primitives (issue 11), each answered by one RESULT or ERROR, synchronously (see "file primitives"
  below): ``STAT`` {path, hash?, follow?} (with hash: sha256, or null and sha256_error naming why),
  ``READ`` {path, offset, length} → data = the bytes, meta = the whole file's size and sha256 (or {path,
  start_line, line_count?, length}: whole lines from start_line on, at most length bytes → meta adds the
  lines' byte offset, lines, more_lines, past_end, truncated), ``WRITE`` {path, mode?, expected_sha256?,
  if_exists} with the content as the frame's data (temporary file in the same directory, fsync, rename,
  directory fsync), ``HASH`` {path}, ``LIST``/``FIND`` {path, depth, limit, hidden, name?, type?, size and
  mtime bounds}, ``GREP`` {path, pattern, include, exclude, context, max_matches, max_bytes}, ``MKDIR``
  {path, parents, mode?} → {created, mode}, ``MOVE`` {source, destination, overwrite}, ``DELETE`` {path,
  recursive, protected}. Reserved for server-side waits (issue 12): ``WAIT`` {pid | path | pattern, until}
  answered when the condition holds or its bound passes. Today an agent answers it with ERROR {code:
  "unsupported"}, so a newer gateway can tell what an older agent lacks.

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
    "DELETE",
    "ERROR",
    "EXEC",
    "FIND",
    "F_END",
    "GREP",
    "HASH",
    "HEADER",
    "HELLO",
    "LIST",
    "MAX_BODY",
    "MKDIR",
    "MOVE",
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
MKDIR = 0x15
MOVE = 0x16
DELETE = 0x17
WAIT = 0x18
FIND = 0x19
GREP = 0x1A
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


# ---------------------------------------------------------------------------------- file primitives
# Each file request is answered at once (one RESULT or ERROR), synchronously: they touch one path (LIST a
# bounded tree) and never wait for anything but the filesystem. Paths are ``wire_bytes`` of the meta
# field: any bytes, never through a shell. ERROR codes: "os" {errno: name, path}, "conflict" {reason,
# sha256?}, "bad_request", "protected" {reason}.

_TMP_TAG = b".rog-"
_TMP_END = b".tmp"
_HASH_CHUNK = 1024 * 1024
_TYPES = ((0o140000, "socket"), (0o120000, "symlink"), (0o100000, "file"), (0o060000, "block"),
          (0o040000, "directory"), (0o020000, "char"), (0o010000, "fifo"))  # fmt: skip


class _FileRefusal(Exception):
    def __init__(self, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.meta = {"code": code, "message": message, **fields}


def _path(meta: dict[str, Any], key: str = "path") -> bytes:
    value = meta.get(key)
    if not isinstance(value, str) or not value:
        raise _FileRefusal("bad_request", key + " must be a non-empty string")
    path = wire_bytes(value)
    if b"\0" in path:
        raise _FileRefusal("bad_request", key + " holds a NUL byte")
    return path


def _kind_of(mode: int) -> str:
    fmt = mode & 0o170000
    for bits, name in _TYPES:
        if fmt == bits:
            return name
    return "unknown"


def _names(uid: int, gid: int) -> tuple[str | None, str | None]:
    owner = group = None
    try:
        import pwd

        owner = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        pass
    try:
        import grp

        group = grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        pass
    return owner, group


def _describe(path: bytes, st: os.stat_result) -> dict[str, Any]:
    owner, group = _names(st.st_uid, st.st_gid)
    kind = _kind_of(st.st_mode)
    info: dict[str, Any] = {
        "type": kind,
        "size": st.st_size,
        "mode": st.st_mode & 0o7777,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "owner": owner,
        "group": group,
        "mtime": st.st_mtime,
        "symlink_target": None,
    }
    if kind == "symlink":
        with contextlib.suppress(OSError):
            info["symlink_target"] = wire_text(os.readlink(path))
    return info


def _sha256_fd(fd: int) -> tuple[str, int]:
    import hashlib

    digest = hashlib.sha256()
    size = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, _HASH_CHUNK)
        if not chunk:
            return digest.hexdigest(), size
        digest.update(chunk)
        size += len(chunk)


def _current_sha256(path: bytes) -> str | None:
    """The SHA-256 of the regular file at ``path`` (following links), None when nothing is there."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    try:
        _regular(path, os.fstat(fd))
        return _sha256_fd(fd)[0]
    finally:
        os.close(fd)


def _regular(path: bytes, st: os.stat_result) -> None:
    kind = _kind_of(st.st_mode)
    if kind != "file":
        raise _FileRefusal("os", "not a regular file: " + kind, errno="EISDIR" if kind == "directory"
                           else "EINVAL", path=wire_text(path))  # fmt: skip


def _file_stat(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    path = _path(meta)
    st = os.stat(path) if meta.get("follow") else os.lstat(path)
    info = _describe(path, st)
    info["sha256"] = None
    if meta.get("hash") and info["type"] not in ("file", "symlink"):
        info["sha256_error"] = "not_a_regular_file"
    elif meta.get("hash"):
        # the metadata is answered whatever stops the hash; sha256_error says what did
        try:
            info["sha256"] = _current_sha256(path)
            if info["sha256"] is None:
                info["sha256_error"] = "not_found"  # a dangling link
        except _FileRefusal:
            info["sha256_error"] = "not_a_regular_file"
        except PermissionError:
            info["sha256_error"] = "permission_denied"
        except OSError as exc:
            info["sha256_error"] = errno.errorcode.get(exc.errno or 0, "EIO")
    return info, b""


def _file_hash(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    path = _path(meta)
    digest = _current_sha256(path)
    if digest is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    return {"sha256": digest}, b""


def _file_read(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """Bytes [offset, offset + length) of a regular file, or (``start_line`` given) its whole lines from
    that 1-based line on, ``line_count`` of them or to the end, at most ``length`` bytes; with the whole
    file's size and SHA-256."""
    import hashlib

    path = _path(meta)
    lines = meta.get("start_line") is not None
    offset, length = int(meta.get("offset", 0)), int(meta["length"])
    if offset < 0 or length < 0 or (lines and offset):
        raise _FileRefusal("bad_request", "offset and length must be >= 0 (offset 0 with start_line)")
    picker = _LinePicker(int(meta["start_line"]), meta.get("line_count"), length) if lines else None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        _regular(path, os.fstat(fd))
        digest = hashlib.sha256()
        size = 0
        out = bytearray()
        while True:
            chunk = os.read(fd, _HASH_CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            if picker is not None:
                picker.feed(chunk)
            else:
                lo, hi = max(offset - size, 0), min(offset + length - size, len(chunk))
                if lo < hi:
                    out += chunk[lo:hi]
            size += len(chunk)
    finally:
        os.close(fd)
    answer = {"size": size, "sha256": digest.hexdigest(), "offset": offset}
    if picker is None:
        return answer, bytes(out)
    found, content = picker.result(size)
    answer.update(found)
    return answer, content


class _LinePicker:
    """Finds lines [first, first + count) of a stream fed in chunks, keeping at most ``cap`` + 1 bytes.

    A line ends after its newline (the last one may have none, at the end of the file). Only whole lines
    are returned; when the cap cuts the lines asked, as many as fit (``truncated``), and when not even the
    first fits, its first ``cap`` bytes (``lines`` 0)."""

    def __init__(self, first: int, count: Any, cap: int) -> None:
        if first < 1 or (count is not None and int(count) < 1):
            raise _FileRefusal("bad_request", "start_line and line_count must be >= 1")
        self.skip = first - 1  # newlines before the first wanted line
        self.count = None if count is None else int(count)
        self.cap = cap
        self.pos = 0  # bytes fed so far
        self.start = 0 if first == 1 else -1  # byte offset of the first wanted line, -1 until found
        self.kept = bytearray()  # bytes from start, at most cap + 1 of them
        self.newlines = 0  # newlines in kept
        self.full = False  # kept holds all the lines asked (or cap + 1 bytes)

    def feed(self, chunk: bytes) -> None:
        piece = chunk
        if self.start < 0:
            seen = chunk.count(b"\n")
            if seen < self.skip:
                self.skip -= seen
                self.pos += len(chunk)
                return
            at = -1
            for _ in range(self.skip):
                at = chunk.find(b"\n", at + 1)
            self.skip = 0
            self.start = self.pos + at + 1
            piece = chunk[at + 1 :]
        self.pos += len(chunk)
        if self.full or not piece:
            return
        room = self.cap + 1 - len(self.kept)
        if len(piece) >= room:
            piece, self.full = piece[:room], True
        if self.count is not None:
            need = self.count - self.newlines
            at = -1
            for _ in range(min(need, piece.count(b"\n"))):
                at = piece.find(b"\n", at + 1)
                need -= 1
            if need == 0:
                piece, self.full = piece[: at + 1], True
        self.kept += piece
        self.newlines += piece.count(b"\n")

    def result(self, size: int) -> tuple[dict[str, Any], bytes]:
        """(meta fields, content) once the whole file was fed."""
        first = self.start
        if first < 0 or first >= size:  # the file has fewer than start_line lines
            none = {"offset": size, "lines": 0, "more_lines": False, "past_end": True, "truncated": False}
            return none, b""
        content, truncated = bytes(self.kept), False
        if len(content) > self.cap:
            cut = content.rfind(b"\n", 0, self.cap)
            content, truncated = content[: cut + 1] if cut >= 0 else content[: self.cap], True
        end = first + len(content)
        lines = content.count(b"\n")
        if content and not content.endswith(b"\n") and end == size:
            lines += 1  # the last line, without a newline
        return {"offset": first, "lines": lines, "more_lines": end < size, "past_end": False,
                "truncated": truncated}, content  # fmt: skip


def _tmp_pid(name: bytes) -> int | None:
    """The agent pid in a temporary file name ``.<base>.rog-<pid>-<hex>.tmp``, else None."""
    if not (name.startswith(b".") and name.endswith(_TMP_END)) or _TMP_TAG not in name:
        return None
    tail = name[name.rfind(_TMP_TAG) + len(_TMP_TAG) : -len(_TMP_END)]
    pid, _, token = tail.partition(b"-")
    if not pid.isdigit() or len(token) != 16 or token.strip(b"0123456789abcdef"):
        return None
    return int(pid)


def _sweep(directory: bytes) -> None:
    """Remove temporary files a killed agent left in ``directory`` (their agent pid is gone)."""
    me = os.getpid()
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            pid = _tmp_pid(entry.name)
            if pid is None or pid == me:
                continue
            try:
                os.kill(pid, 0)
                continue  # that agent is alive (its write may be in progress)
            except ProcessLookupError:
                pass
            except PermissionError:
                continue  # another user's live process
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.geteuid():
                    os.unlink(entry.path)


def _fsync_dir(directory: bytes) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _split(path: bytes) -> tuple[bytes, bytes]:
    directory, base = os.path.split(path)
    if not base:
        raise _FileRefusal("bad_request", "the path names a directory, not a file")
    return directory or b".", base


def _replace_atomically(path: bytes, content: bytes, mode: int, owner: tuple[int, int] | None) -> None:
    """Write a temporary file next to ``path``, fsync it, rename it over ``path``, fsync the directory.
    Whatever happens, ``path`` holds either its old or its new content, never a mix."""
    import secrets

    directory, base = _split(path)
    _sweep(directory)
    tmp = os.path.join(directory, b"." + base[:160] + _TMP_TAG + str(os.getpid()).encode() + b"-"
                       + secrets.token_hex(8).encode() + _TMP_END)  # fmt: skip
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view[:_HASH_CHUNK]) :]
            if owner is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(fd, owner[0], owner[1])
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _file_write(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    import hashlib

    path = _path(meta)
    if_exists = meta.get("if_exists", "overwrite")
    expected = meta.get("expected_sha256")
    if if_exists not in ("overwrite", "fail"):
        raise _FileRefusal("bad_request", "if_exists must be overwrite or fail")
    with contextlib.suppress(OSError):
        if os.path.islink(path):
            path = os.path.realpath(path)  # write through a link: the link stays a link
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        _regular(path, st)
        if not os.access(path, os.W_OK):  # replacing it would bypass its permissions (and its owner)
            raise PermissionError(errno.EACCES, "Permission denied", path)
        if if_exists == "fail":
            raise _FileRefusal("conflict", "the file exists", reason="exists", path=wire_text(path))
    if expected is not None:
        current = _current_sha256(path) if st is not None else None
        if current != expected:
            raise _FileRefusal("conflict", "the file changed", reason="sha256_mismatch", sha256=current,
                               path=wire_text(path))  # fmt: skip
    if st is not None:
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
        if meta.get("mode") is not None:
            mode = int(meta["mode"]) & 0o7777
    elif meta.get("mode") is not None:
        mode, owner = int(meta["mode"]) & 0o7777, None
    else:
        umask = os.umask(0o022)
        os.umask(umask)
        mode, owner = 0o666 & ~umask, None
    _replace_atomically(path, data, mode, owner)
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "created": st is None}, b""


def _walk(root: bytes, depth: int, hidden: bool, errors: list[dict[str, Any]]) -> Any:
    """(relative path, lstat) of everything under ``root`` down to ``depth``: pre-order, each directory's
    names in byte order (the same order on every call); links are never followed. Unreadable directories
    are added to ``errors``."""
    if not 1 <= depth <= 64:
        raise _FileRefusal("bad_request", "depth must be in 1..64")
    if _kind_of(os.stat(root).st_mode) != "directory":
        raise _FileRefusal("os", "not a directory", errno="ENOTDIR", path=wire_text(root))
    # a stack of (relative directory, its remaining names, level): no recursion
    stack: list[tuple[bytes, list[bytes], int]] = []

    def push(rel: bytes, level: int) -> None:
        try:
            names = sorted(os.listdir(os.path.join(root, rel) if rel else root), reverse=True)
        except OSError as exc:
            errors.append({"path": wire_text(rel), "errno": errno.errorcode.get(exc.errno or 0, "EIO")})
            return
        stack.append((rel, [n for n in names if hidden or not n.startswith(b".")], level))

    push(b"", 1)
    while stack:
        rel, names, level = stack[-1]
        if not names:
            stack.pop()
            continue
        child = os.path.join(rel, names.pop()) if rel else names.pop()
        try:
            st = os.lstat(os.path.join(root, child))
        except OSError:
            continue  # vanished while walking
        yield child, st
        if _kind_of(st.st_mode) == "directory" and level < depth:
            push(child, level + 1)


def _file_list(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """Entries under a directory in :func:`_walk` order, at most ``limit`` (``truncated`` when more were
    there). FIND: only those matching name glob, type, size and mtime bounds (at most ``scan`` visited)."""
    root = _path(meta)
    depth, limit, hidden = int(meta.get("depth", 1)), int(meta.get("limit", 1000)), bool(meta.get("hidden"))
    if limit < 1:
        raise _FileRefusal("bad_request", "limit must be >= 1")
    name = wire_bytes(meta["name"]) if meta.get("name") else None
    kind = meta.get("type")
    low_size, high_size = meta.get("min_size"), meta.get("max_size")
    after, before = meta.get("mtime_min"), meta.get("mtime_max")
    scan = int(meta.get("scan", 1_000_000))
    entries: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    truncated = False
    visited = 0
    for child, st in _walk(root, depth, hidden, errors):
        visited += 1
        if visited > scan:
            truncated = True
            break
        if name is not None:
            import fnmatch

            if not fnmatch.fnmatchcase(os.path.basename(child), name):
                continue
        if kind is not None and _kind_of(st.st_mode) != kind:
            continue
        if (low_size is not None and st.st_size < low_size) or (
            high_size is not None and st.st_size > high_size
        ):
            continue
        if (after is not None and st.st_mtime < after) or (before is not None and st.st_mtime > before):
            continue
        if len(entries) >= limit:
            truncated = True
            break
        info = _describe(os.path.join(root, child), st)
        info["path"] = wire_text(child)
        entries.append(info)
    return {"entries": entries, "truncated": truncated, "errors": errors, "visited": visited}, b""


_BINARY_PROBE = 8192
_GREP_FILE_MAX = 32 * 1024 * 1024
_GREP_LINE_MAX = 1000


def _grep_file(path: bytes, rel: bytes, regex: Any, meta: dict[str, Any], out: dict[str, Any]) -> None:
    context = int(meta.get("context", 0))
    try:
        with open(path, "rb") as fh:
            content = fh.read(_GREP_FILE_MAX + 1)
    except OSError as exc:
        out["skipped"].append({"path": wire_text(rel), "reason": errno.errorcode.get(exc.errno or 0, "EIO")})
        return
    if len(content) > _GREP_FILE_MAX:
        out["skipped"].append({"path": wire_text(rel), "reason": "too_large"})
        return
    if b"\0" in content[:_BINARY_PROBE]:
        out["skipped"].append({"path": wire_text(rel), "reason": "binary"})
        return
    out["files_searched"] += 1
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()

    def shown(index: int) -> str:
        return wire_text(lines[index][:_GREP_LINE_MAX])

    for number, line in enumerate(lines):
        if not regex.search(line):
            continue
        if len(out["matches"]) >= out["max_matches"] or out["bytes"] >= out["max_bytes"]:
            out["truncated"] = True
            return
        match = {
            "path": wire_text(rel),
            "line": number + 1,
            "text": shown(number),
            "before": [shown(i) for i in range(max(0, number - context), number)],
            "after": [shown(i) for i in range(number + 1, min(len(lines), number + 1 + context))],
        }
        out["bytes"] += min(len(line), _GREP_LINE_MAX) + 64
        out["matches"].append(match)


def _file_grep(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """Lines matching a Python regular expression in the regular files under ``path`` (or in one file),
    in :func:`_walk` order; binary files (a NUL byte in the first 8 KiB) are skipped and reported."""
    import fnmatch
    import re

    root = _path(meta)
    try:
        regex = re.compile(wire_bytes(meta["pattern"]), re.IGNORECASE if meta.get("ignore_case") else 0)
    except re.error as exc:
        raise _FileRefusal("bad_request", "bad pattern: " + str(exc)) from None
    include = [wire_bytes(g) for g in meta.get("include", [])]
    exclude = [wire_bytes(g) for g in meta.get("exclude", [])]
    out: dict[str, Any] = {"matches": [], "skipped": [], "truncated": False, "files_searched": 0, "bytes": 0,
                           "max_matches": int(meta.get("max_matches", 200)),
                           "max_bytes": int(meta.get("max_bytes", 65536))}  # fmt: skip
    errors: list[dict[str, Any]] = []
    if _kind_of(os.stat(root).st_mode) == "file":
        _grep_file(root, os.path.basename(root), regex, meta, out)
    else:
        for child, st in _walk(root, int(meta.get("depth", 64)), bool(meta.get("hidden")), errors):
            if out["truncated"]:
                break
            base = os.path.basename(child)
            if _kind_of(st.st_mode) != "file":
                continue
            if include and not any(fnmatch.fnmatchcase(base, g) for g in include):
                continue
            if any(fnmatch.fnmatchcase(base, g) for g in exclude):
                continue
            _grep_file(os.path.join(root, child), child, regex, meta, out)
    for key in ("bytes", "max_matches", "max_bytes"):
        del out[key]
    out["errors"] = errors
    return out, b""


def _set_new_dir_mode(path: bytes, mode: int) -> None:
    """``mode`` exactly on a directory this request just made, through a descriptor of that directory
    (never following a link put in its place)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:  # the mode gives even the owner no read permission: by name, then
        os.chmod(path, mode)
        return
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _file_mkdir(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """A directory. With ``mode`` it gets exactly that mode, like ``mkdir -m``: made with it under a zero
    umask, then, where mkdir(2) could not give it (Linux ignores setgid in its mode and a setgid parent
    passes its setgid bit on; setuid), set with fchmod. Without ``mode``: the kernel's default (0777 less
    the umask, setgid inherited from a setgid parent). Missing parents (``parents``) get the default, as
    with ``mkdir -p -m``; a directory already there is left as it is. Answers whether this request made
    the directory and the mode it has now."""
    path = _path(meta)
    mode = meta.get("mode")
    if mode is not None and (not isinstance(mode, int) or not 0 <= mode <= 0o7777):
        raise _FileRefusal("bad_request", "mode must be a number in 0..0o7777")
    parents = bool(meta.get("parents"))
    if os.path.lexists(path):
        if parents and os.path.isdir(path):
            return {"created": False, "mode": os.stat(path).st_mode & 0o7777}, b""
        raise _FileRefusal("conflict", "the path exists", reason="exists", path=wire_text(path))
    head, tail = os.path.split(path)
    if not tail:  # "a/b/"
        head = os.path.split(head)[0]
    if parents and head and not os.path.isdir(head):
        os.makedirs(head, exist_ok=True)  # the default mode, the umask applied
    try:
        if mode is None:
            os.mkdir(path)
        else:
            umask = os.umask(0)
            try:
                os.mkdir(path, mode & 0o1777)  # the permission bits and sticky; setgid is ignored
            finally:
                os.umask(umask)
            if os.lstat(path).st_mode & 0o7777 != mode:
                _set_new_dir_mode(path, mode)
    except FileExistsError:
        if parents and os.path.isdir(path):  # made by someone else since the check: mkdir -p is content
            return {"created": False, "mode": os.stat(path).st_mode & 0o7777}, b""
        raise
    _fsync_dir(os.path.dirname(os.path.abspath(path)))
    return {"created": True, "mode": os.lstat(path).st_mode & 0o7777}, b""


def _copy_tree(source: bytes, destination: bytes) -> None:
    """Across filesystems: a copy next to the destination, renamed into place, then the source removed."""
    import secrets
    import shutil

    directory, base = _split(destination)
    tmp = os.path.join(directory, b"." + base[:160] + _TMP_TAG + str(os.getpid()).encode() + b"-"
                       + secrets.token_hex(8).encode() + _TMP_END)  # fmt: skip
    try:
        if os.path.isdir(source) and not os.path.islink(source):
            shutil.copytree(os.fsdecode(source), os.fsdecode(tmp), symlinks=True)
        else:
            shutil.copy2(source, tmp, follow_symlinks=False)
            if not os.path.islink(tmp):
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        os.rename(tmp, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            if os.path.isdir(tmp) and not os.path.islink(tmp):
                shutil.rmtree(tmp)
            else:
                os.unlink(tmp)
        raise
    _fsync_dir(directory)
    if os.path.isdir(source) and not os.path.islink(source):
        shutil.rmtree(source)
    else:
        os.unlink(source)


def _file_move(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    source, destination = _path(meta, "source"), _path(meta, "destination")
    os.lstat(source)  # not_found names the source
    if not meta.get("overwrite") and os.path.lexists(destination):
        raise _FileRefusal("conflict", "the destination exists", reason="exists",
                           path=wire_text(destination))  # fmt: skip
    try:
        os.rename(source, destination)
        cross = False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        _copy_tree(source, destination)
        cross = True
    _fsync_dir(os.path.dirname(os.path.abspath(destination)))
    return {"cross_filesystem": cross}, b""


def _home() -> bytes:
    try:
        import pwd

        return os.fsencode(pwd.getpwuid(os.geteuid()).pw_dir)
    except (ImportError, KeyError):
        return os.path.expanduser(b"~")


def _file_delete(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    import shutil

    path = _path(meta)
    directory, base = os.path.split(os.path.abspath(path))
    # the entry itself (a link is removed, never followed), in its real directory
    real = os.path.join(os.path.realpath(directory), base) if base else os.path.realpath(path)
    homes = [(os.path.realpath(_home()), "home")]
    if os.environb.get(b"HOME"):
        homes.append((os.path.realpath(os.environb[b"HOME"]), "home"))
    listed = [os.path.realpath(wire_bytes(p)) for p in meta.get("protected", []) if isinstance(p, str)]
    # "/" and the home (the account's and $HOME) themselves; an operator-listed path and everything under it;
    # for a recursive delete also any directory holding one of them
    for guard, reason in [(b"/", "root")] + homes + [(p, "protected") for p in listed]:
        inside = reason == "protected" and real.startswith(guard.rstrip(b"/") + b"/")
        holds = bool(meta.get("recursive")) and guard.startswith(real.rstrip(b"/") + b"/")
        if real == guard or inside or holds:
            raise _FileRefusal("protected", "refusing to delete " + wire_text(real) + " (" + reason + ")",
                               reason=reason, path=wire_text(guard))  # fmt: skip
    st = os.lstat(path)
    kind = _kind_of(st.st_mode)
    if kind == "directory":
        if not meta.get("recursive"):
            raise _FileRefusal("os", "a directory (recursive: true deletes it)", errno="EISDIR",
                               path=wire_text(path))  # fmt: skip
        shutil.rmtree(path)
    else:
        os.unlink(path)
    _fsync_dir(directory or b".")
    return {"type": kind}, b""


_FILE_KINDS: dict[int, Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]] = {
    STAT: _file_stat,
    READ: _file_read,
    WRITE: _file_write,
    HASH: _file_hash,
    LIST: _file_list,
    FIND: _file_list,
    GREP: _file_grep,
    MKDIR: _file_mkdir,
    MOVE: _file_move,
    DELETE: _file_delete,
}


def _file_answer(request_id: int, kind: int, meta: dict[str, Any], data: bytes) -> bytes:
    """The one frame answering a file request."""
    try:
        result, payload = _FILE_KINDS[kind](meta, data)
        return encode(request_id, RESULT, result, payload)
    except _FileRefusal as exc:
        return encode(request_id, ERROR, exc.meta)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "EIO")
        where = exc.filename if isinstance(exc.filename, (bytes, str)) else None
        path = wire_text(os.fsencode(where)) if where is not None else None
        return encode(request_id, ERROR, {"code": "os", "errno": name, "message": exc.strerror or name,
                                          "path": path})  # fmt: skip
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        return encode(request_id, ERROR, {"code": "bad_request", "message": repr(exc)})


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
        if kind in _FILE_KINDS:
            self.send(_file_answer(request_id, kind, meta, data))
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
            "uid": os.geteuid(),
            "python": ".".join(str(part) for part in sys.version_info[:3]),
            "subreaper": self.subreaper,
            "kinds": [HELLO, EXEC, DATA, CANCEL, *sorted(_FILE_KINDS)],
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
