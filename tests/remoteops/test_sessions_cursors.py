"""Read cursors of a session's output stream against the real sshd: following next_offset with any chunk sizes
returns every byte exactly once (raw and with escapes stripped), also while the session is still printing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoteops import RemoteSessions, SessionRead, TransportSettings
from remoteops.sessions.wire import strip_ansi
from tests.fixtures.profiles import examples
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.session_helpers import running_sessions, session_root

PROMPT = "rog-cur> "
CONTENT = "plain é✓ 😀\n\x1b[31mred\x1b[0m and \x1b[1mbold\x1b[0m\n\x1b]0;a title\x07after\n" * 6


async def _quiet_session(sessions: RemoteSessions, source: Path) -> int:
    """A session that printed CONTENT (through cat) and sits at its prompt; the stream size."""
    await sessions.ensure("plain", "cur")
    sent = await sessions.send("plain", "cur", f"PS1='{PROMPT}'; cat {source}", enter=True)
    done = await sessions.wait_for("plain", "cur", "^rog-cur> $", since=sent.cursor_before, timeout_s=20)
    assert done.outcome == "matched"
    return done.output_bytes


@pytest.fixture
def quiet_session(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, shared_dir: Path
) -> Iterator[tuple[BlockingPortal, RemoteSessions, SessionRead, SessionRead]]:
    """A finished printout in a portal thread (for sync hypothesis tests) and its whole stream, raw and
    stripped, read in one call each."""
    source = shared_dir / "content"
    source.write_text(CONTENT)
    source.chmod(0o644)
    with (
        session_root() as root,
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(ops_factory()) as ops,
        portal.wrap_async_context_manager(running_sessions(ops, tmp_path / "state", root, settings)) as s,
    ):
        size = portal.call(_quiet_session, s, source)
        raw = portal.call(lambda: s.read("plain", "cur", max_bytes=32 * 1024, ansi=True))
        plain = portal.call(lambda: s.read("plain", "cur", max_bytes=32 * 1024))
        assert raw.next_offset == size == plain.next_offset
        yield portal, s, raw, plain


@pytest.mark.sshd
@pytest.mark.slow
@settings(
    max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(4, 300), min_size=1, max_size=8), ansi=st.booleans())
def test_stream_cursors_with_random_chunk_sizes_never_skip_or_repeat(
    quiet_session: tuple[BlockingPortal, RemoteSessions, SessionRead, SessionRead],
    sizes: list[int],
    ansi: bool,
) -> None:
    portal, sessions, raw, plain = quiet_session
    assert raw.size is not None
    since, pieces = 0, []
    for i in range(raw.size + 1):
        size = sizes[i % len(sizes)]
        chunk = portal.call(
            lambda s=since, n=size: sessions.read("plain", "cur", since=s, max_bytes=n, ansi=ansi)
        )
        assert chunk.offset == since
        assert chunk.next_offset == since + chunk.returned_bytes
        assert chunk.returned_bytes <= size or not ansi  # stripped reads may finish one escape sequence
        pieces.append(chunk.data)
        assert chunk.next_offset is not None
        since = chunk.next_offset
        if not chunk.more:
            break
    assert since == raw.size
    assert "".join(pieces) == (raw.data if ansi else plain.data)
    assert plain.data == strip_ansi(raw.data)
    assert "red and bold\nafter\n" in plain.data


@pytest.mark.sshd
@pytest.mark.anyio
async def test_reading_while_the_session_prints_collects_every_byte_once(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path
) -> None:
    script = 'i=0; while [ $i -lt 400 ]; do printf "line %s é✓\\n" $i; i=$((i+1)); done'
    with session_root() as root:
        async with (
            ops_factory() as ops,
            running_sessions(ops, tmp_path / "state", root, settings) as sessions,
        ):
            with anyio.fail_after(90):
                await sessions.ensure("plain", "cur")
                sent = await sessions.send("plain", "cur", f"PS1='{PROMPT}'; {script}", enter=True)
                since, pieces = sent.cursor_before, []
                while True:
                    chunk = await sessions.read("plain", "cur", since=since, max_bytes=500)
                    assert chunk.offset == since
                    pieces.append(chunk.data)
                    assert chunk.next_offset is not None
                    since = chunk.next_offset
                    if "".join(pieces).endswith(PROMPT):
                        break
                    if not chunk.more:  # caught up with the printing: block on the target for more
                        await sessions.wait_for("plain", "cur", ".", since=since, timeout_s=10)
                whole = await sessions.read("plain", "cur", since=sent.cursor_before, max_bytes=32 * 1024)
    assert "".join(pieces) == whole.data
    lines = [ln for ln in whole.data.splitlines() if ln.startswith("line ")]
    assert lines == [f"line {i} é✓" for i in range(400)]
