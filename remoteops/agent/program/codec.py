"""rog-agent: the program remoteops runs on a target, over one long-lived SSH session, to carry requests.

Target side: **stdlib only, Python >= 3.8** (no 3.9+ syntax or APIs; annotations are never evaluated).
Nothing is installed: the gateway starts ``python3 -I -S -c LOADER SIZE SHA256`` (see ``agent.boot``), writes
the program's bytes on the session's stdin, and the loader checks their SHA-256 and runs them with the
globals ``{"__name__": "__rog_agent__", "__rog_build__": SHA256}``. The program is written in parts
(``remoteops/agent/program/{codec,procs,supervise,exec,files,tree,workers,loop}.py``) that
``remoteops.agent.program.agent_source()`` joins, in that order, into the one text sent. The agent speaks
the framed protocol below on stdin/stdout, never opens a socket, reads nothing but its frames, and exits
when its stdin closes (or stdout breaks, or it gets SIGTERM/SIGHUP) after killing what it started.
The gateway imports the codec part too (one source of truth for the framing and the constants).

Framing (big-endian)::

    header  u32 body_length | u32 request_id | u8 kind | u8 flags        (10 bytes)
    body    u32 meta_length | meta (UTF-8 JSON object, or empty) | data (raw bytes, the rest)

Binary payloads (stdin, output, file contents) are raw bytes in ``data``, never base64 inside JSON. Text
fields that may hold arbitrary bytes (argv, paths, env) travel as strings decoded from UTF-8 with
``surrogateescape`` (:func:`wire_text`): JSON escapes the surrogates and :func:`wire_bytes` restores the
exact bytes on the other side, whatever the target's locale (the ssh carrier sends UTF-8 too). Request ids
are chosen by the gateway (0 is the channel itself); any number of requests may be in flight, answers come
in any order. Every request ends with exactly one final frame (RESULT or ERROR); non-final frames
(STARTED, OUTPUT, PROGRESS) may precede it. A request that fails is an ERROR answer with a ``code``, never
an agent exit; no traceback is ever part of an answer.

Kinds, gateway → agent:

* ``HELLO`` {min, max}: version negotiation, must come first → HELLO {version, pid, uid, python, kinds,
  subreaper, build} (``build``: the SHA-256 the loader checked, or null) or ERROR {code: "version"} (then
  the agent exits) — a mismatch is an answer, never a hang.
* ``PING`` {}: liveness → RESULT {} at once, whatever else is in progress (file work never runs on the
  loop that answers it).
* ``EXEC`` {argv, cwd?, env, marker, limit_s, kill_s, head, tail, stdin}: run argv in a new session with
  ``ROG_CALL=<marker>`` added to its environment, under a per-call supervisor: a small forked process that
  is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every descendant of the command stays in the
  supervisor's tree whatever it does (``setsid``, double fork, ``env -i``). stdin follows in DATA frames
  when ``stdin`` is true. → STARTED {pid}, then RESULT {exit, signal, timed_out, killed, cancelled,
  survivors, survivor_procs, duration_s, out, err} with data = stdout head + tail + stderr head + tail
  (``out``/``err`` = [head_len, tail_len, total]). At ``limit_s`` every live descendant of the supervisor
  (and every process of the agent's tree whose environment holds the marker) gets SIGTERM, ``kill_s``
  later SIGKILL; ``killed`` is true only when ``/proc`` shows none of them left; otherwise ``survivors``
  lists their pids and ``survivor_procs`` [{pid, argv}] names them. Exit status mirrors coreutils
  ``timeout``: 124 when SIGTERM ended it, 137 when SIGKILL was needed. A program that cannot be started is
  exit 127 (not found) or 126 (not executable) with a plain message on stderr; an unusable ``cwd`` is exit
  2. A command that exits by itself leaves its background processes running (``nohup`` works): they are
  re-parented to the agent (a subreaper too) once the call has answered.
* ``DATA`` (flag END on the last): a chunk of the request's input stream (exec stdin).
* ``CANCEL`` {grace_s}: kill request ``id``'s processes like a time limit (TERM, KILL after grace_s); the
  request then ends with its RESULT (``cancelled`` true). A file request is stopped at once and answered
  ERROR {code: "cancelled"}.
* Reserved for streaming (issue 12): EXEC ``{..., stream: true}`` asks for the output as it arrives in
  OUTPUT frames ``{stream: 1 | 2, offset}`` (offset = bytes of that stream before the chunk, END on each
  stream's last; the RESULT then carries only the totals), paced by ``CREDIT`` ``{bytes}`` frames from the
  gateway so a slow consumer never makes the agent buffer without bound.
* File primitives (issue 11), each answered by one RESULT or ERROR: ``STAT`` {path, hash?, follow?} (with
  hash: sha256, or null and sha256_error naming why), ``READ`` {path, offset, length} → data = the bytes,
  meta = the whole file's size and sha256 (or {path, start_line, line_count?, length}: whole lines from
  start_line on, at most length bytes → meta adds the lines' byte offset, lines, more_lines, past_end,
  truncated), ``WRITE`` {path, mode?, expected_sha256?, if_exists} with the content as the frame's data
  (temporary file in the same directory, fsync, rename, directory fsync), ``HASH`` {path}, ``LIST``/``FIND``
  {path, depth, limit, hidden, name?, type?, size and mtime bounds}, ``GREP`` {path, pattern, include,
  exclude, context, max_matches, max_bytes}, ``MKDIR`` {path, parents, mode?} → {created, mode}, ``MOVE``
  {source, destination, overwrite}, ``DELETE`` {path, recursive, protected}. Each runs in its own forked
  worker process (at most ``_FILE_WORKERS`` at once, the rest queued), never on the loop, and has a time
  bound from its arrival: ``limit_s`` in its meta, else ``_FILE_LIMIT_S``; past it the worker is killed and
  the answer is ERROR {code: "timeout", limit_s}. Other ERROR codes: "os" {errno: name, path}, "conflict"
  {reason, sha256?}, "bad_request", "protected" {reason}, "internal" (a short ``type: message``).
  Reserved for server-side waits (issue 12): ``WAIT`` {pid | path | pattern, until} answered when the
  condition holds or its bound passes. Today an agent answers it with ERROR {code: "unsupported"}, so a
  newer gateway can tell what an older agent lacks.

Kinds, agent → gateway: ``RESULT`` and ``ERROR`` {code, message} (final), ``STARTED``, and reserved
``OUTPUT`` {stream, offset} (a chunk of a process's output as it arrives; END on the last) and
``PROGRESS`` {done, total} for streaming output and long transfers.
"""

from __future__ import annotations

import json
import struct
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
    "PING",
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
PING = 0x06
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


def _short(exc: BaseException) -> str:
    """An exception as one short ``type: message`` (never a traceback)."""
    return (type(exc).__name__ + ": " + str(exc))[:300]


def _final_frame(blob: bytes, request_id: int) -> bool:
    """Whether ``blob`` is exactly one whole RESULT or ERROR frame of ``request_id`` (a worker's answer)."""
    if len(blob) < HEADER.size + _META.size:
        return False
    body_length, rid, kind, _ = HEADER.unpack_from(blob, 0)
    return rid == request_id and kind in (RESULT, ERROR) and HEADER.size + body_length == len(blob)


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
