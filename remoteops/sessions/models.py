"""Records and results of interactive sessions on a target's tmux and their settings.

Its errors are in :mod:`remoteops.sessions.errors`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "KEY_NAMES",
    "SESSION_NAME",
    "EnsureOutcome",
    "KeyName",
    "SendMode",
    "SessionCloseResult",
    "SessionEnsureResult",
    "SessionHealth",
    "SessionInfo",
    "SessionName",
    "SessionRead",
    "SessionRecord",
    "SessionSendResult",
    "SessionSettings",
    "SessionState",
    "SessionView",
    "SessionWaitOutcome",
    "SessionWaitResult",
]

SESSION_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
"""Closed name grammar (tmux turns ``.`` and ``:`` in session names into ``_``, so neither is allowed)."""
SessionName = Annotated[
    str,
    Field(
        pattern=SESSION_NAME.pattern,
        description="Session name: lower-case letters, digits, _ and -, at most 63 characters.",
    ),
]

KeyName = Literal[
    "Enter",
    "Tab",
    "BTab",
    "Escape",
    "Space",
    "BSpace",
    "Up",
    "Down",
    "Left",
    "Right",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "Insert",
    "Delete",
    "F1",
    "F2",
    "F3",
    "F4",
    "F5",
    "F6",
    "F7",
    "F8",
    "F9",
    "F10",
    "F11",
    "F12",
    "C-a",
    "C-b",
    "C-c",
    "C-d",
    "C-e",
    "C-k",
    "C-l",
    "C-n",
    "C-p",
    "C-r",
    "C-u",
    "C-w",
    "C-z",
    "C-\\",
]
KEY_NAMES: frozenset[str] = frozenset(KeyName.__args__)  # type: ignore[attr-defined]
SessionState = Literal["alive", "exited"]
EnsureOutcome = Literal["created", "reattached"]
SendMode = Literal["auto", "literal", "paste"]
SessionView = Literal["stream", "screen", "scrollback"]
SessionWaitOutcome = Literal["matched", "timeout", "session_exited"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SessionSettings(BaseModel):
    """``[sessions]`` in the gateway configuration."""

    model_config = _FROZEN

    remote_dir: str = Field(
        ".remoteops-gateway/sessions", min_length=1, max_length=200, pattern=r"^[^\x00\n]+$"
    )
    """The sessions' tmux socket and output directories on the target; relative to the remote $HOME."""
    width: int = Field(200, ge=20, le=1000)
    height: int = Field(50, ge=5, le=500)
    history_limit: int = Field(10000, ge=100, le=200000)
    """Scrollback lines tmux keeps per session."""
    stream_max_bytes: int = Field(64 * 1024 * 1024, ge=64 * 1024, le=16 * 1024**3)
    """The output stream file of one session stops growing at about this size (``stream_ended``)."""
    read_max_bytes: int = Field(32 * 1024, ge=1024, le=1024 * 1024)
    send_max_bytes: int = Field(64 * 1024, ge=1, le=1024 * 1024)
    wait_default_s: float = Field(30, gt=0)
    wait_max_s: float = Field(300, gt=0)
    wait_segment_s: float = Field(30, gt=0, le=300)
    """One blocking wait on the target lasts at most this long (progress is reported between segments)."""
    list_max: int = Field(200, ge=1, le=10000)


class SessionRecord(BaseModel):
    """What the state store keeps per session: where it is and the identity of its tmux session."""

    model_config = _FROZEN

    id: str = Field(pattern=r"^s-[0-9a-f]{24}$")
    target: str
    name: str = Field(pattern=SESSION_NAME.pattern)
    state: SessionState
    tmux_id: str = Field(pattern=r"^\$[0-9]+$")
    tmux_created: str = Field(pattern=r"^[0-9]+$")
    remote_dir: str
    cwd: str | None = None
    width: int
    height: int
    created_at: float
    last_seen_at: float
    exited_at: float | None = None


class SessionInfo(BaseModel):
    model_config = _FROZEN

    target: str
    name: str
    state: SessionState = Field(description="alive, or exited (the session ended on the target).")
    tmux_session: str = Field(description="tmux session id and creation time: the identity checked.")
    remote_dir: str
    cwd: str | None = None
    width: int
    height: int
    created_at: float
    last_seen_at: float
    exited_at: float | None = None

    @classmethod
    def of(cls, record: SessionRecord) -> SessionInfo:
        return cls(
            target=record.target,
            name=record.name,
            state=record.state,
            tmux_session=f"{record.tmux_id} {record.tmux_created}",
            remote_dir=record.remote_dir,
            cwd=record.cwd,
            width=record.width,
            height=record.height,
            created_at=record.created_at,
            last_seen_at=record.last_seen_at,
            exited_at=record.exited_at,
        )


class SessionEnsureResult(SessionInfo):
    outcome: EnsureOutcome = Field(description="created, or reattached to the live session of that name.")
    adopted: bool = Field(
        description="Reattached to a live session whose identity was not the recorded one (no record, or "
        "a stale one): its output stream may be new to this caller."
    )
    output_bytes: int = Field(description="Size of the output stream now (a cursor for session_read).")


class SessionSendResult(BaseModel):
    model_config = _FROZEN

    target: str
    name: str
    sent_bytes: int = Field(description="Bytes of text delivered (UTF-8).")
    mode: Literal["literal", "paste", "none"] = Field(
        description="How the text went in: literal (exact bytes), paste (bracketed paste when the program "
        "asked for it, newlines as Enter), none (keys only)."
    )
    keys: list[str]
    cursor_before: int = Field(
        description="Output stream size just before sending: pass as `since` to session_wait_for / read."
    )


class SessionRead(BaseModel):
    model_config = _FROZEN

    target: str
    name: str
    view: SessionView
    state: SessionState
    data: str
    ansi: bool = Field(description="Escape sequences kept (true) or stripped (false).")
    offset: int | None = Field(None, description="stream: byte offset of the first byte returned.")
    next_offset: int | None = Field(
        None, description="stream: pass as `since` to continue exactly after the returned bytes."
    )
    size: int | None = Field(None, description="stream: size of the output stream when read.")
    returned_bytes: int = Field(description="Bytes of the stream (or of the capture) returned.")
    more: bool = Field(description="stream: more bytes are already available after next_offset.")
    truncated: bool = Field(False, description="screen/scrollback: the capture was cut to max_bytes.")
    stream_ended: bool = Field(
        False,
        description="The stream stopped growing (sessions.stream_max_bytes reached, or the session ended).",
    )
    cursor_x: int | None = None
    cursor_y: int | None = None
    width: int | None = None
    height: int | None = None


class SessionWaitResult(BaseModel):
    model_config = _FROZEN

    target: str
    name: str
    outcome: SessionWaitOutcome
    matched: str | None = Field(None, description="matched: the text the regex matched.")
    line: str | None = Field(
        None, description="matched: the whole line (escapes stripped), possibly the unfinished last line."
    )
    cursor: int = Field(
        description="matched: stream offset just after the matching line; otherwise where a later wait "
        "should resume (the start of the unfinished last line: a prompt still being printed is not missed)."
    )
    output_bytes: int
    waited_ms: float


class SessionCloseResult(BaseModel):
    model_config = _FROZEN

    target: str
    name: str
    outcome: Literal["killed", "already_exited"]
    directory_removed: bool


class SessionHealth(BaseModel):
    model_config = _FROZEN

    total: int
    by_state: dict[str, int]
    remote_dir: str
    width: int
    height: int
    history_limit: int
    reconciling: int = Field(0, description="Recorded sessions whose remote state is still being checked.")
