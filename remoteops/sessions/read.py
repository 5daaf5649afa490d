"""What goes into a session and what comes out, gateway side: the checked plan of a send, and what a session
program read on the target turned into a :class:`SessionRead` — the stream cut on a UTF-8 character and an
escape-sequence boundary (cursors never skip or repeat a byte, and stripping chunk by chunk equals stripping
the whole), the pane capture bounded to its last whole lines."""

from __future__ import annotations

from collections.abc import Sequence

from remoteops._errors import InvalidRequest
from remoteops._programs import decode_text_prefix
from remoteops.sessions.models import KEY_NAMES, SendMode, SessionRead, SessionRecord, SessionView
from remoteops.sessions.wire import PaneCapture, StreamChunk, escape_safe_cut, strip_ansi

__all__ = ["pane_read", "plan_send", "stream_read"]


def plan_send(
    text: str | None, keys: Sequence[str], enter: bool, mode: SendMode, *, max_bytes: int
) -> tuple[bytes, str, list[str]]:
    """The text's bytes, how they go in (literal | paste | none) and the keys pressed; InvalidRequest
    (nothing sent) for NUL, oversized text, an unknown key name or nothing at all."""
    text = text or ""
    payload = text.encode("utf-8", "surrogatepass")
    if "\0" in text:
        raise InvalidRequest(field="text", reason="must not contain NUL")
    if len(payload) > max_bytes:
        raise InvalidRequest(field="text", reason=f"longer than {max_bytes} bytes")
    bad = [k for k in keys if k not in KEY_NAMES]
    if bad:
        raise InvalidRequest(field="keys", reason=f"unknown key name(s): {', '.join(bad[:5])}")
    pressed = [*keys, "Enter"] if enter else list(keys)
    if not payload and not pressed:
        raise InvalidRequest(field="text", reason="nothing to send: give text, keys or enter")
    used = "none"
    if payload:
        used = "paste" if mode == "paste" or (mode == "auto" and "\n" in text) else "literal"
    return payload, used, pressed


def stream_read(record: SessionRecord, chunk: StreamChunk, *, limit: int, ansi: bool) -> SessionRead:
    """``chunk`` may hold up to HOLD_MAX bytes beyond ``limit`` (the look-ahead of a stripped read)."""
    ended = not (chunk.alive and chunk.piped)
    at_end = chunk.start + len(chunk.data) >= chunk.size
    if ansi:
        data = chunk.data[:limit]
    else:
        data = escape_safe_cut(chunk.data, limit, at_end=at_end, final=at_end and ended)
    text, used = decode_text_prefix(data, final=ended and chunk.start + len(data) >= chunk.size)
    end = chunk.start + used
    return SessionRead(
        target=record.target,
        name=record.name,
        view="stream",
        state="alive" if chunk.alive else "exited",
        data=text if ansi else strip_ansi(text),
        ansi=ansi,
        offset=chunk.start,
        next_offset=end,
        size=chunk.size,
        returned_bytes=used,
        # more: a read from next_offset now would return something (bytes beyond what this read looked at,
        # or a cut made by the limit) — not only the held-back start of a character or escape sequence
        more=end < chunk.size and (not at_end or len(chunk.data) > limit),
        stream_ended=ended,
    )


def _without_blank_tail(data: bytes, *, keep: int) -> bytes:
    """``data`` without its trailing whitespace-only lines, keeping at least the first ``keep`` lines."""
    rows = data.split(b"\n")
    ended = bool(rows) and rows[-1] == b""
    if ended:
        rows.pop()
    while len(rows) > keep and not rows[-1].strip():
        rows.pop()
    return b"\n".join(rows) + (b"\n" if ended else b"")


def pane_read(
    record: SessionRecord, cap: PaneCapture, *, view: SessionView, limit: int, ansi: bool
) -> SessionRead:
    """A capture over ``limit`` bytes keeps its end, from the first whole line on (``truncated``). The
    screen's blank rows below the cursor and the last written row are left out (a mostly empty pane would
    otherwise end in dozens of empty lines); ``height`` still says how tall the pane is."""
    data = _without_blank_tail(cap.data, keep=(cap.cursor_y or 0) + 1) if view == "screen" else cap.data
    truncated = len(data) > limit
    if truncated:
        data = data[len(data) - limit :]
        cut = data.find(b"\n")
        data = data[cut + 1 :] if 0 <= cut < len(data) - 1 else data
    return SessionRead(
        target=record.target,
        name=record.name,
        view=view,
        state="alive",
        data=data.decode("utf-8", "replace"),
        ansi=ansi,
        returned_bytes=len(data),
        more=False,
        truncated=truncated,
        cursor_x=cap.cursor_x,
        cursor_y=cap.cursor_y,
        width=cap.width,
        height=cap.height,
    )
