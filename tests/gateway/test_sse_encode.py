"""The faster SSE encoder gives exactly the bytes of ``sse_starlette``'s own, for any event."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sse_starlette.event import ServerSentEvent

from gateway.serving import sse

pytestmark = pytest.mark.unit

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=200)
_lines = st.lists(st.sampled_from(["a", "é", "☃", " ", "\n", "\r", "\r\n", ":", '"']), max_size=30).map(
    "".join
)


@given(
    data=st.one_of(st.none(), _text, _lines, st.integers()),
    event=st.one_of(st.none(), _lines),
    id_=st.one_of(st.none(), _lines),
    comment=st.one_of(st.none(), _lines),
    retry=st.one_of(st.none(), st.integers(0, 10_000)),
    sep=st.sampled_from(["\r\n", "\n", "\r"]),
)
def test_the_fast_encoder_gives_the_original_bytes_for_any_event(
    data: object, event: str | None, id_: str | None, comment: str | None, retry: int | None, sep: str
) -> None:
    made = ServerSentEvent(data, event=event, id=id_, comment=comment, retry=retry, sep=sep)
    assert sse.fast_encode(made) == sse._original(made)


def test_a_large_one_line_answer_is_encoded_as_the_original_does() -> None:
    data = '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"' + "x\\n" * 500_000 + '"}]}}'
    made = ServerSentEvent(data, event="message", id="s-1")
    assert sse.fast_encode(made) == sse._original(made)


def test_installing_makes_every_event_use_it_and_twice_changes_nothing() -> None:
    before = ServerSentEvent.encode
    try:
        sse.install()
        sse.install()
        assert ServerSentEvent.encode is sse.fast_encode
        assert (
            ServerSentEvent("a\nb", event="message").encode()
            == b"event: message\r\ndata: a\r\ndata: b\r\n\r\n"
        )
    finally:
        ServerSentEvent.encode = before  # type: ignore[method-assign]
