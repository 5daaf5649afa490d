"""The wire layer of sessions: run one session program on the target (``RemoteOps.run``, program on stdin)
and turn its answer into a typed value. No state lives here; :mod:`remoteops.sessions.manager` keeps the
records."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from remoteops._programs import run_program
from remoteops._runner import Runner
from remoteops.sessions.errors import (
    SessionCapabilityMissing,
    SessionConflict,
    SessionExited,
    SessionRemoteError,
)
from remoteops.sessions.models import (
    SessionRecord,
    SessionSettings,
)
from remoteops.sessions.scripts import (
    CLOSE_SCRIPT,
    ENSURE_SCRIPT,
    LOOK_SCRIPT,
    READ_SCRIPT,
    WAIT_SCRIPT,
    send_script,
)

__all__ = [
    "HOLD_MAX",
    "Found",
    "Look",
    "PaneCapture",
    "SessionWire",
    "StreamChunk",
    "Waited",
    "escape_safe_cut",
    "strip_ansi",
    "unfinished_escape",
]

_LIMIT_S = 30.0
_LOCAL_GRACE_S = 15.0  # beyond the remote limit, for ssh itself

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*\x07"  # OSC ... BEL
    r"|\x1b\][^\x1b]*\x1b\\"  # OSC ... ST
    r"|\x1b[()*+][0-9A-Za-z]"  # charset designation
    r"|\x1b[=>78]"
    r"|\x1b[@-_]"  # other two-character escapes
    r"|[\r\x07]"
)
_INCOMPLETE = re.compile(r"\x1b(\[[0-?]*[ -/]*|\](?:[^\x07\x1b]|\x1b(?!\\))*\x1b?|[()*+])?\Z")
_COMPLETE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()*+][0-9A-Za-z]|[^\[\]()*+])")
HOLD_MAX = 256
"""An escape sequence longer than this is never held back (it is returned, stripped as far as it can be)."""


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences, carriage returns and bells (the same rules the wait program uses)."""
    return _ANSI.sub("", text)


def unfinished_escape(data: bytes) -> int:
    """How many trailing bytes of ``data`` are an escape sequence that may continue in later output."""
    tail = data[-HOLD_MAX:].decode("latin-1")
    found = _INCOMPLETE.search(tail)
    return len(tail) - found.start() if found else 0


def escape_safe_cut(data: bytes, limit: int, *, at_end: bool, final: bool) -> bytes:
    """The prefix of ``data`` (at most ``limit`` bytes, plus the rest of an escape sequence that starts the
    chunk) that ends on no escape sequence cut in two, so that stripping chunk by chunk equals stripping the
    whole stream. ``data`` may hold up to HOLD_MAX bytes beyond ``limit`` to look ahead; ``at_end``: it
    reaches the end of the stream as it stands; ``final``: nothing will ever follow."""
    body = data[:limit]
    hold = unfinished_escape(body)
    if not hold or (final and len(body) == len(data)):
        return body
    start = len(body) - hold
    if start > 0:
        return body[:start]  # cut before the sequence: the next read starts with it
    whole = _COMPLETE.match(data.decode("latin-1"))
    if whole is not None:
        return data[: whole.end()]
    if at_end and len(data) < HOLD_MAX and not final:
        return b""  # only the start of a sequence is there yet: it is returned once complete
    return body


@dataclass(frozen=True)
class Found:
    """What ensure found or made: ``new`` (created now) or a live session of that name."""

    new: bool
    tmux_id: str
    tmux_created: str
    remote_dir: str
    output_bytes: int


@dataclass(frozen=True)
class Look:
    alive: bool
    output_bytes: int
    piped: bool


@dataclass(frozen=True)
class StreamChunk:
    alive: bool
    size: int
    start: int
    piped: bool
    data: bytes


@dataclass(frozen=True)
class PaneCapture:
    alive: bool
    cursor_x: int
    cursor_y: int
    width: int
    height: int
    data: bytes


@dataclass(frozen=True)
class Waited:
    outcome: str  # matched | timeout | session_exited
    cursor: int
    size: int
    matched: str | None = None
    line: str | None = None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("bad base64") from None


class SessionWire:
    def __init__(self, ops: Runner, settings: SessionSettings, *, ceiling_s: float) -> None:
        self._ops = ops
        self._settings = settings
        self._ceiling_s = ceiling_s
        self._root = settings.remote_dir.rstrip("/") or "/"

    async def _run(
        self, target: str, name: str, stage: str, script: str, args: Sequence[str], limit: float
    ) -> list[str]:
        limit = min(limit, self._ceiling_s)  # the operator's exec ceiling holds for these programs too
        argv = ["sh", "-s", "--", self._root, *args]
        result = await run_program(self._ops, target, argv, script, limit_s=limit, grace_s=_LOCAL_GRACE_S)
        lines = result.stdout.splitlines()
        err = next((ln.split(" ", 2)[1:] for ln in lines if ln.startswith("ROGERR ")), None)
        if err is not None:
            reason, detail = [*err, ""][:2]
            if reason == "missing":
                raise SessionCapabilityMissing(
                    f"the target lacks {detail}", target=target, session=name, tool=detail
                )
            raise SessionRemoteError(f"{reason}: {detail}", target=target, session=name, stage=stage)
        if result.exit_code != 0:
            raise SessionRemoteError(
                f"session program exited {result.exit_code}: {result.stderr.strip()[-400:]}",
                target=target,
                session=name,
                stage=stage,
            )
        return lines

    @staticmethod
    def _bad(target: str, name: str, stage: str) -> SessionRemoteError:
        return SessionRemoteError(
            f"unexpected answer from the {stage} program", target=target, session=name, stage=stage
        )

    @staticmethod
    def _identity(record: SessionRecord) -> list[str]:
        return [record.tmux_id, record.tmux_created, record.remote_dir]

    async def ensure(self, target: str, name: str, *, token: str, cwd: str | None) -> Found:
        s = self._settings
        args = [
            name,
            str(s.width),
            str(s.height),
            str(s.history_limit),
            str(max(1, s.stream_max_bytes // 512)),
            token,
            "1" if cwd is not None else "0",
            cwd or "",
        ]
        lines = await self._run(target, name, "ensure", ENSURE_SCRIPT, args, _LIMIT_S)
        head = next((ln.split() for ln in lines if ln.startswith(("ROGNEW ", "ROGFOUND "))), None)
        directory = next((ln[len("ROGDIR ") :] for ln in lines if ln.startswith("ROGDIR ")), "")
        if (
            head is None
            or len(head) != 4
            or not re.fullmatch(r"\$[0-9]+", head[1])
            or not (head[2].isdigit() and head[3].isdigit())
        ):
            raise self._bad(target, name, "ensure")
        return Found(
            new=head[0] == "ROGNEW",
            tmux_id=head[1],
            tmux_created=head[2],
            remote_dir=directory,
            output_bytes=int(head[3]),
        )

    async def look(self, record: SessionRecord) -> Look:
        args = self._identity(record)
        lines = await self._run(record.target, record.name, "look", LOOK_SCRIPT, args, _LIMIT_S)
        fields = next((ln.split()[1:] for ln in lines if ln.startswith("ROGLOOK ")), None)
        if fields is None or len(fields) != 3 or not fields[1].isdigit():
            raise self._bad(record.target, record.name, "look")
        return Look(alive=fields[0] == "alive", output_bytes=int(fields[1]), piped=fields[2] == "1")

    async def send(self, record: SessionRecord, text: bytes, mode: str, keys: Sequence[str]) -> int:
        """Deliver text (``mode`` literal | paste | none) then keys; the stream size just before."""
        args = [*self._identity(record), mode, *keys]
        lines = await self._run(record.target, record.name, "send", send_script(text), args, _LIMIT_S)
        fields = next((ln.split()[1:] for ln in lines if ln.startswith("ROGSEND ")), None)
        if fields == ["gone"]:
            raise SessionExited(
                "the session has ended on the target", target=record.target, session=record.name
            )
        if fields is None or len(fields) != 2 or fields[0] != "ok" or not fields[1].isdigit():
            raise self._bad(record.target, record.name, "send")
        return int(fields[1])

    async def read_stream(self, record: SessionRecord, *, since: int, limit: int) -> StreamChunk:
        args = [*self._identity(record), "stream", str(since), str(limit), "0", "0"]
        lines = await self._run(record.target, record.name, "read", READ_SCRIPT, args, _LIMIT_S)
        fields = lines[0].split()[1:] if lines else []
        if fields[:1] == ["cursor"]:
            raise SessionConflict(
                f"since is beyond the end of the stream ({fields[1]} bytes)",
                target=record.target,
                session=record.name,
                reason="cursor_beyond_end",
            )
        if fields[:1] == ["nostream"]:
            raise SessionConflict(
                "the session's output stream is gone on the target",
                target=record.target,
                session=record.name,
                reason="stream_missing",
            )
        if fields[:1] != ["ok"] or len(fields) != 5:
            raise self._bad(record.target, record.name, "read")
        try:
            data = _b64("".join(lines[1:]))
        except ValueError:
            raise self._bad(record.target, record.name, "read") from None
        return StreamChunk(
            alive=fields[1] == "alive",
            size=int(fields[2]),
            start=int(fields[3]),
            piped=fields[4] == "1",
            data=data,
        )

    async def capture(
        self, record: SessionRecord, *, view: str, limit: int, lines_back: int, keep_ansi: bool
    ) -> PaneCapture:
        args = [*self._identity(record), view, "0", str(limit), str(lines_back), "1" if keep_ansi else "0"]
        lines = await self._run(record.target, record.name, "read", READ_SCRIPT, args, _LIMIT_S)
        fields = lines[0].split()[1:] if lines else []
        if fields == ["gone"]:
            raise SessionExited(
                "the session has ended on the target", target=record.target, session=record.name
            )
        if fields[:1] != ["pane"] or len(fields) != 6 or not all(f.isdigit() for f in fields[2:]):
            raise self._bad(record.target, record.name, "read")
        try:
            data = _b64("".join(lines[1:]))
        except ValueError:
            raise self._bad(record.target, record.name, "read") from None
        x, y, w, h = (int(f) for f in fields[2:])
        return PaneCapture(alive=True, cursor_x=x, cursor_y=y, width=w, height=h, data=data)

    async def wait(self, record: SessionRecord, *, bound_s: float, since: int | None, pattern: str) -> Waited:
        args = [
            *self._identity(record),
            str(max(0, int(bound_s * 100))),
            "-" if since is None else str(since),
            pattern,
        ]
        lines = await self._run(record.target, record.name, "wait", WAIT_SCRIPT, args, bound_s + _LIMIT_S)
        fields = next((ln.split()[1:] for ln in lines if ln.startswith("ROGWAIT ")), None)
        if fields is None or len(fields) != 3 or not (fields[1].isdigit() and fields[2].isdigit()):
            raise self._bad(record.target, record.name, "wait")
        found: dict[str, str] = {}
        for key in ("ROGMATCH ", "ROGLINE "):
            raw = next((ln[len(key) :] for ln in lines if ln.startswith(key)), None)
            if raw is not None:
                try:
                    found[key] = _b64(raw).decode(errors="replace")
                except ValueError:
                    found[key] = ""
        return Waited(
            outcome=fields[0],
            cursor=int(fields[1]),
            size=int(fields[2]),
            matched=found.get("ROGMATCH "),
            line=found.get("ROGLINE "),
        )

    async def close(self, record: SessionRecord) -> tuple[str, bool]:
        lines = await self._run(
            record.target, record.name, "close", CLOSE_SCRIPT, self._identity(record), _LIMIT_S
        )
        fields = next((ln.split()[1:] for ln in lines if ln.startswith("ROGCLOSE ")), None)
        if fields is None or len(fields) != 2 or fields[0] not in ("killed", "already_exited"):
            raise self._bad(record.target, record.name, "close")
        return fields[0], fields[1] == "yes"
