"""Stripping terminal escapes from a session's output stream chunk by chunk (no target needed): for any stream
and any chunk sizes, the chunks follow each other exactly (no byte skipped or repeated) and stripping them one
by one gives what stripping the whole stream gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from remoteops._programs import decode_text_prefix
from remoteops.sessions.models import SessionRecord
from remoteops.sessions.read import stream_read
from remoteops.sessions.wire import HOLD_MAX, StreamChunk, escape_safe_cut, strip_ansi
from tests.fixtures.profiles import examples

_PIECES = st.sampled_from(
    [
        "plain ",
        "é✓😀",
        "\r\n",
        "\x1b[31m",
        "\x1b[0m",
        "\x1b[?2004h",
        "\x1b[12;40H",
        "\x1b]0;a title\x07",
        "\x1b]2;other\x1b\\",
        "\x1b(B",
        "\x1b=",
        "\x1bM",
        "\x07",
        "$ ",
    ]
)


def _read_all(stream: bytes, sizes: list[int], *, ended: bool) -> tuple[str, int]:
    """What a caller collects by following next_offset with the given max_bytes, as _read_stream cuts."""
    since, parts = 0, []
    for i in range(4 * len(stream) + 4):
        limit = sizes[i % len(sizes)]
        data = stream[since : since + limit + HOLD_MAX]
        at_end = since + len(data) >= len(stream)
        body = escape_safe_cut(data, limit, at_end=at_end, final=at_end and ended)
        text, used = decode_text_prefix(body, final=ended and since + len(body) >= len(stream))
        assert used <= len(body)
        parts.append(strip_ansi(text))
        since += used
        if since >= len(stream):
            break
    return "".join(parts), since


@settings(max_examples=examples(300), deadline=None)
@given(pieces=st.lists(_PIECES, max_size=40), sizes=st.lists(st.integers(4, 64), min_size=1, max_size=10))
def test_stripped_chunks_join_to_the_stripped_stream(pieces: list[str], sizes: list[int]) -> None:
    stream = "".join(pieces).encode()
    joined, end = _read_all(stream, sizes, ended=True)
    assert end == len(stream)
    assert joined == strip_ansi(stream.decode())


@settings(max_examples=examples(200), deadline=None)
@given(pieces=st.lists(_PIECES, min_size=1, max_size=20), cut=st.integers(1, 12))
def test_an_escape_sequence_still_arriving_is_held_back_until_it_is_complete(
    pieces: list[str], cut: int
) -> None:
    whole = "".join(pieces).encode() + b"\x1b[38;5;196m" + b"after"
    partial = whole[: len(whole) - len(b"after") - cut]  # the sequence is cut: more output will follow
    seen, end = _read_all(partial, [64], ended=False)
    assert "[38" not in seen  # no fragment of the unfinished sequence leaks
    assert "196" not in seen
    rest, _ = _read_all(whole[end:], [64], ended=True)
    assert seen + rest == strip_ansi(whole.decode())


def test_strip_removes_csi_osc_charset_and_carriage_returns() -> None:
    raw = "\x1b[?2004h\x1b]0;t\x07$ \x1b[1mbold\x1b[0m\x1b(B\r\nnext\x1b]2;x\x1b\\"
    assert strip_ansi(raw) == "$ bold\nnext"


def test_the_start_of_a_character_still_being_written_is_held_back_not_replaced() -> None:
    assert decode_text_prefix("é✓😀".encode()[:8], final=False) == ("é✓", 5)
    assert decode_text_prefix("😀".encode()[:3], final=False) == ("", 0)  # the rest has not arrived
    assert decode_text_prefix("😀".encode()[:3], final=True) == ("\ufffd", 3)  # it never will


def _record() -> SessionRecord:
    return SessionRecord(
        id="s-" + "0" * 24, target="t", name="n", state="alive", tmux_id="$1", tmux_created="1",
        remote_dir="/x", width=80, height=24, created_at=0.0, last_seen_at=0.0,
    )  # fmt: skip


def test_a_stream_read_says_more_only_when_a_read_now_would_return_something() -> None:
    held = "ok 😀".encode()[:-1]  # ends in the first three bytes of a character
    read = stream_read(_record(), StreamChunk(True, len(held), 0, True, held), limit=64, ansi=False)
    assert (read.data, read.next_offset, read.more) == ("ok ", 3, False)
    cut = b"x" * 100
    read = stream_read(_record(), StreamChunk(True, 100, 0, True, cut[: 64 + HOLD_MAX]), limit=64, ansi=False)
    assert (read.next_offset, read.more) == (64, True)
