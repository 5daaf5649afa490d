"""The agent program (``rog-agent``), written in parts and sent to a target as one text.

The parts are stdlib-only modules that run on the target's Python >= 3.8; the protocol is described in
``codec``'s docstring, which opens the joined program. :func:`agent_source` joins them **in the order of**
``PARTS``: from each part it removes every top-level relative import (``from .codec import ...``: in the
joined text all parts share one namespace) and every ``from __future__`` import, then puts one
``from __future__ import annotations`` after the first part's docstring. The lines removed are found with
``ast`` (their exact line spans), so formatting cannot change what is dropped. The SHA-256 covers exactly
the bytes sent; the loader hands it to the program as ``__rog_build__`` and HELLO reports it as ``build``.

Parts, in the order they are joined:

- ``codec`` — the framed protocol (its docstring opens the program), kinds, ``encode``, ``FrameReader``.
- ``procs`` — the agent's view of processes: the ``/proc`` table and a process tree's live members.
- ``supervise`` — a call's supervisor: the child subreaper forked for each EXEC.
- ``exec`` — EXEC on the agent's side: pipes, supervisor, time limit, the verified kill.
- ``files`` — file primitives on one path: STAT, HASH, READ, WRITE (atomic replace).
- ``tree`` — file primitives over a tree: LIST, FIND, GREP (iterative walks).
- ``changes`` — file primitives that change the tree: MKDIR, MOVE, DELETE (iterative).
- ``workers`` — file requests off the loop, each in its own killable forked worker with a time bound.
- ``loop`` — the one loop: frames in and out, HELLO and PING, dispatch, signals, reaping, timers.

The gateway imports this package for the codec (frame layout, kinds, ``encode``, ``FrameReader``,
``wire_text``/``wire_bytes``): one source of truth for both ends.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

from remoteops.agent.program.codec import (
    CANCEL,
    CREDIT,
    DATA,
    DELETE,
    ERROR,
    EXEC,
    F_END,
    FIND,
    GREP,
    HASH,
    HEADER,
    HELLO,
    LIST,
    MAX_BODY,
    MKDIR,
    MOVE,
    OUTPUT,
    PING,
    PROGRESS,
    PROTOCOL_MAX,
    PROTOCOL_MIN,
    READ,
    RESULT,
    STARTED,
    STAT,
    WAIT,
    WRITE,
    FrameReader,
    encode,
    wire_bytes,
    wire_text,
)

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
    "PARTS",
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
    "agent_source",
    "encode",
    "join_parts",
    "wire_bytes",
    "wire_text",
]

PARTS = ("codec", "procs", "supervise", "exec", "files", "tree", "changes", "workers", "loop")
"""The parts in the order they are joined: each part's top-level code only uses the parts before it."""

_FUTURE = b"from __future__ import annotations\n"


def _dropped_lines(source: bytes, name: str) -> set[int]:
    """0-based numbers of the lines that the join removes from one part."""
    dropped: set[int] = set()
    for node in ast.walk(ast.parse(source, filename=name)):
        if not isinstance(node, ast.ImportFrom) or not (node.level or node.module == "__future__"):
            continue
        if node.col_offset != 0 or node.end_lineno is None:
            raise ValueError(f"{name}: line {node.lineno}: a part's own imports must be at the top level")
        dropped.update(range(node.lineno - 1, node.end_lineno))
    return dropped


def join_parts(sources: list[tuple[str, bytes]]) -> bytes:
    """The one program text made of ``(name, source)`` parts, in the order given."""
    out: list[bytes] = []
    for index, (name, source) in enumerate(sources):
        dropped = _dropped_lines(source, name)
        lines = source.splitlines(keepends=True)
        kept = [line for number, line in enumerate(lines) if number not in dropped]
        if index == 0:  # the future import right after the first part's docstring
            tree = ast.parse(source, filename=name)
            first = tree.body[0]
            has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            split = (first.end_lineno or 0) if has_doc else 0
            out += [*lines[:split], b"\n", _FUTURE]
            kept = [line for number, line in enumerate(lines) if number >= split and number not in dropped]
        else:
            out.append(b"\n\n# " + b"-" * 40 + b" part: " + name.encode() + b"\n")
        out += kept
    return b"".join(out)


@cache
def agent_source() -> tuple[bytes, str]:
    """The joined agent program's bytes and their SHA-256 (hex): exactly what is sent to a target."""
    here = Path(__file__).parent
    program = join_parts([(name, (here / f"{name}.py").read_bytes()) for name in PARTS])
    return program, hashlib.sha256(program).hexdigest()
