"""Interactive sessions against the real sshd (the target is this machine, user ro-plain): ensure by name on a
gateway-owned tmux socket, reattach after a restart of the manager, send text and keys, paste, wait on the
target, and a session that ends on the target."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from remoteops import (
    InvalidRequest,
    PolicyDenied,
    RemoteSessions,
    SessionExited,
    SessionNotFound,
    StateStore,
    TransportSettings,
)
from remoteops.sessions.manager import SESSIONS, session_key
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.session_helpers import (
    kill_remote_session,
    running_sessions,
    session_root,
    tmux_as_owner,
    tmux_sessions,
)

pytestmark = [pytest.mark.sshd, pytest.mark.anyio]

PROMPT = "rog-ready> "


@pytest.fixture
def root() -> Iterator[Path]:
    with session_root() as path:
        yield path


async def _shell(sessions: RemoteSessions, name: str = "work") -> int:
    """Ensure a session with a known prompt (PS1 without newline); the cursor after that prompt."""
    await sessions.ensure("plain", name)
    sent = await sessions.send("plain", name, f"PS1='{PROMPT}'", enter=True)
    ready = await sessions.wait_for("plain", name, "^rog-ready> $", since=sent.cursor_before, timeout_s=20)
    assert ready.outcome == "matched", ready
    return ready.cursor


async def test_ensure_twice_gives_one_remote_session_created_then_reattached(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            first = await sessions.ensure("plain", "work")
            second = await sessions.ensure("plain", "work")
    assert (first.outcome, second.outcome) == ("created", "reattached")
    assert second.adopted is False
    assert first.tmux_session == second.tmux_session
    assert tmux_sessions(root) == ["work"]
    # the gateway-owned server: fixed size, the history limit, no status line, socket dir private
    geometry = tmux_as_owner(
        root, "display-message", "-p", "-t", "=work:", "#{window_width}x#{window_height}"
    )
    assert geometry.stdout.strip() == "80x24"
    history = tmux_as_owner(root, "show-options", "-g", "-v", "history-limit")
    assert history.stdout.strip() == "10000"
    assert (await anyio.Path(root).stat()).st_mode & 0o777 == 0o700
    # the record is on disk with the tmux identity
    store = StateStore(tmp_path / "state")
    store.open_sync()
    stored = store.get_sync(SESSIONS, session_key("plain", "work"))
    assert stored is not None
    assert f"{stored.tmux_id} {stored.tmux_created}" == first.tmux_session


async def test_a_new_manager_on_the_same_state_reattaches_with_the_same_scrollback(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    state = tmp_path / "state"
    async with ops_factory() as ops:
        async with running_sessions(ops, state, root, settings) as sessions:
            with anyio.fail_after(60):
                await _shell(sessions)
                sent = await sessions.send("plain", "work", "echo before-restart", enter=True)
                await sessions.wait_for("plain", "work", "^before-restart$", since=sent.cursor_before)
                before = await sessions.read("plain", "work", view="scrollback", lines=100)
        async with running_sessions(ops, state, root, settings) as again:
            with anyio.fail_after(60):
                listed, _ = again.list_sessions()
                back = await again.ensure("plain", "work")
                after = await again.read("plain", "work", view="scrollback", lines=100)
    assert [s.name for s in listed] == ["work"]
    assert (back.outcome, back.adopted) == ("reattached", False)
    assert "before-restart" in after.data
    assert after.data == before.data
    assert tmux_sessions(root) == ["work"]


async def test_a_lost_record_never_replaces_a_live_session_it_is_adopted(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops:
        async with running_sessions(ops, tmp_path / "one", root, settings) as sessions:
            with anyio.fail_after(60):
                made = await sessions.ensure("plain", "work")
        async with running_sessions(ops, tmp_path / "other", root, settings) as fresh:  # no record at all
            with anyio.fail_after(60):
                found = await fresh.ensure("plain", "work")
    assert (found.outcome, found.adopted) == ("reattached", True)
    assert found.tmux_session == made.tmux_session
    assert tmux_sessions(root) == ["work"]


async def test_wait_for_matches_a_prompt_without_a_trailing_newline(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            await _shell(sessions)
            sent = await sessions.send(
                "plain", "work", "printf 'Password for x: '; read -r answer", enter=True
            )
            asked = await sessions.wait_for(
                "plain", "work", "Password for [a-z]+: $", since=sent.cursor_before
            )
            screen = await sessions.read("plain", "work", view="screen")
    assert asked.outcome == "matched"
    assert asked.matched == "Password for x: "
    assert asked.line == "Password for x: "
    assert asked.cursor == asked.output_bytes  # the unfinished last line ends the stream
    assert screen.data.splitlines()[screen.cursor_y or 0].startswith("Password for x:")
    # the empty rows below the prompt are not returned: the cursor's row is the last one
    assert len(screen.data.splitlines()) == (screen.cursor_y or 0) + 1
    assert screen.height is not None
    assert screen.height > len(screen.data.splitlines())


async def test_wait_for_times_out_with_a_cursor_that_does_not_skip_an_unfinished_line(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            await sessions.ensure("plain", "work")
            sent = await sessions.send("plain", "work", f"PS1='{PROMPT}'", enter=True)
            await sessions.wait_for("plain", "work", "^rog-ready> $", since=sent.cursor_before)
            missed = await sessions.wait_for(
                "plain", "work", "^never$", since=sent.cursor_before, timeout_s=0.3
            )
            # the prompt is an unfinished line: a later wait from this cursor still sees it whole
            again = await sessions.wait_for(
                "plain", "work", "^rog-ready> $", since=missed.cursor, timeout_s=5
            )
    assert missed.outcome == "timeout"
    assert missed.cursor == missed.output_bytes - len(PROMPT)
    assert again.outcome == "matched"


async def test_ctrl_c_interrupts_a_running_sleep(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            await _shell(sessions)
            sent = await sessions.send("plain", "work", "sleep 1000", enter=True)
            running = await sessions.wait_for(
                "plain", "work", "^rog-ready> $", since=sent.cursor_before, timeout_s=0.5
            )
            assert running.outcome == "timeout"  # still sleeping: no new prompt
            stop = await sessions.send("plain", "work", keys=["C-c"])
            back = await sessions.wait_for("plain", "work", "^rog-ready> $", since=stop.cursor_before)
            asked = await sessions.send("plain", "work", "echo status=$?", enter=True)
            done = await sessions.wait_for("plain", "work", "^status=[0-9]+$", since=asked.cursor_before)
    assert back.outcome == "matched"
    assert done.line == "status=130"  # 128 + SIGINT: the sleep was interrupted, not finished


async def test_multi_line_text_is_pasted_intact(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, shared_dir: Path
) -> None:
    target = shared_dir / "pasted.txt"
    body = "first line\n\tindented with a tab\n  'quotes' \"and\" $(not run) `nor this`\nlast line"
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            await _shell(sessions)
            sent = await sessions.send("plain", "work", f"cat > {target}", enter=True)
            await sessions.wait_for("plain", "work", "cat > ", since=sent.cursor_before)
            pasted = await sessions.send("plain", "work", body + "\n")
            closed = await sessions.send("plain", "work", keys=["C-d"])
            await sessions.wait_for("plain", "work", "^rog-ready> $", since=closed.cursor_before)
    assert pasted.mode == "paste"
    assert await anyio.Path(target).read_text() == body + "\n"


async def test_literal_text_is_never_read_as_key_names(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            await _shell(sessions)
            sent = await sessions.send("plain", "work", "echo Enter C-c Escape", mode="literal", enter=True)
            echoed = await sessions.wait_for("plain", "work", "^Enter C-c Escape$", since=sent.cursor_before)
    assert (sent.mode, sent.keys) == ("literal", ["Enter"])
    assert echoed.outcome == "matched"


async def test_a_session_killed_on_the_target_reports_session_exited(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            start = await _shell(sessions)
            async with anyio.create_task_group() as tg:
                results = []

                async def waiter() -> None:
                    results.append(
                        await sessions.wait_for("plain", "work", "^never$", since=start, timeout_s=30)
                    )

                tg.start_soon(waiter)
                await anyio.to_thread.run_sync(kill_remote_session, root, "work")
            with pytest.raises(SessionExited):
                await sessions.send("plain", "work", "echo hi", enter=True)
            listed, _ = sessions.list_sessions(state="exited")
            stream = await sessions.read("plain", "work")  # what it printed stays readable until close
            closed = await sessions.close("plain", "work")
    assert results[0].outcome == "session_exited"
    assert [s.name for s in listed] == ["work"]
    assert stream.state == "exited"
    assert PROMPT in stream.data
    assert (closed.outcome, closed.directory_removed) == ("already_exited", True)
    assert sessions.list_sessions()[1] == 0


async def test_ensure_after_the_session_ended_creates_a_new_one(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            first = await sessions.ensure("plain", "work")
            sent = await sessions.send("plain", "work", "exit", enter=True)
            gone = await sessions.wait_for("plain", "work", "^never$", since=sent.cursor_before, timeout_s=20)
            second = await sessions.ensure("plain", "work")
    assert gone.outcome == "session_exited"
    assert (second.outcome, second.adopted) == ("created", False)
    assert second.remote_dir != first.remote_dir  # a new incarnation; the old directory is gone
    left = [p.name async for p in anyio.Path(root).iterdir() if await p.is_dir()]
    assert left == [second.remote_dir.rsplit("/", 1)[1]]


async def test_close_kills_the_recorded_session_and_removes_its_directory(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            made = await sessions.ensure("plain", "work")
            await sessions.ensure("plain", "other")
            theirs, _ = sessions.list_sessions(among={"sudo"})  # a caller restricted to another target
            ours, _ = sessions.list_sessions(among={"plain"})
            closed = await sessions.close("plain", "work")
            with pytest.raises(SessionNotFound):
                await sessions.close("plain", "work")
    assert (closed.outcome, closed.directory_removed) == ("killed", True)
    assert theirs == []
    assert sorted(s.name for s in ours) == ["other", "work"]
    assert tmux_sessions(root) == ["other"]
    assert not await anyio.Path(made.remote_dir).exists()


async def test_bad_names_keys_and_targets_are_refused_before_anything_runs(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            for bad in ("../x", "A", "a.b", "", "x" * 64):
                with pytest.raises(InvalidRequest):
                    await sessions.ensure("plain", bad)
            with pytest.raises(PolicyDenied):
                await sessions.ensure("nowhere", "work")
            with pytest.raises(SessionNotFound):
                await sessions.send("plain", "work", "echo")
            await sessions.ensure("plain", "work")
            with pytest.raises(InvalidRequest):
                await sessions.send("plain", "work", keys=["rm -rf /"])
            with pytest.raises(InvalidRequest):
                await sessions.send("plain", "work", "a\0b")
            with pytest.raises(InvalidRequest):
                await sessions.send("plain", "work")
    assert not root.joinpath("tmux.sock").exists() or tmux_sessions(root) == ["work"]


async def test_the_sent_text_appears_in_no_argv_on_the_target(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, shared_dir: Path
) -> None:
    secret = "s3cret-" + os.urandom(8).hex()
    seen = shared_dir / "argv"
    async with ops_factory() as ops, running_sessions(ops, tmp_path / "state", root, settings) as sessions:
        with anyio.fail_after(60):
            await _shell(sessions)
            # a spy in the session records every argv on the machine while the text arrives
            spy = f"while :; do cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' >> {seen}; done"
            await sessions.send("plain", "work", f"( {spy} ) & spy=$!", enter=True)
            # the spy has made a pass before the text is sent (a loaded machine may start it late: it would
            # have recorded nothing while the text arrived); the target is this machine
            while not (seen.exists() and seen.stat().st_size > 0):  # noqa: ASYNC110 - another process's file
                await anyio.sleep(0.02)
            sent = await sessions.send("plain", "work", f"echo {secret} | wc -c", enter=True)
            await sessions.wait_for("plain", "work", "^ *[0-9]+$", since=sent.cursor_before)
            await sessions.send("plain", "work", 'kill "$spy"', enter=True)
    assert seen.stat().st_size > 0
    assert secret.encode() not in seen.read_bytes()


async def test_a_session_whose_shell_is_killed_by_a_signal_is_seen_exited_after_a_restart(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path
) -> None:
    state = tmp_path / "state"
    async with ops_factory() as ops:
        async with running_sessions(ops, state, root, settings) as sessions:
            with anyio.fail_after(60):
                await _shell(sessions)
                pid = int(tmux_as_owner(root, "display-message", "-p", "-t", "=work:", "#{pane_pid}").stdout)
        os.kill(pid, signal.SIGKILL)
        async with running_sessions(ops, state, root, settings) as again:
            with anyio.fail_after(60):
                await again.recovered()  # the startup check of the recorded sessions
                listed, _ = again.list_sessions()
    assert [(s.name, s.state) for s in listed] == [("work", "exited")]


@pytest.mark.parametrize("carrier", ["ssh", "agent"])
async def test_ensure_send_wait_and_read_work_on_either_carrier(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, carrier: str
) -> None:
    async with (
        ops_factory(carrier=carrier) as ops,
        running_sessions(ops, tmp_path / "state", root, settings) as sessions,
    ):
        with anyio.fail_after(60):
            await _shell(sessions)
            sent = await sessions.send("plain", "work", "echo on-$((6 * 7))", enter=True)
            seen = await sessions.wait_for("plain", "work", "^on-42$", since=sent.cursor_before)
            chunk = await sessions.read("plain", "work", since=sent.cursor_before)
            stats = ops.stats().model_dump()
    assert seen.outcome == "matched"
    assert "on-42\n" in chunk.data
    assert stats["carriers"]["plain"]["carrier"] == carrier


@pytest.mark.parametrize("differs", ["tmux_id", "remote_dir"])
async def test_a_stale_record_of_another_identity_never_kills_the_live_session_it_is_adopted(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, root: Path, differs: str
) -> None:
    state = tmp_path / "state"
    async with ops_factory() as ops:
        async with running_sessions(ops, state, root, settings) as sessions:
            with anyio.fail_after(60):
                made = await sessions.ensure("plain", "work")
        shell = tmux_as_owner(root, "display-message", "-p", "-t", "=work:", "#{pane_pid}").stdout.strip()
        # the store now holds a record of the same name with another identity (an older incarnation)
        store = StateStore(state)
        store.open_sync()
        key = session_key("plain", "work")
        live = store.get_sync(SESSIONS, key)
        assert live is not None
        other = {"tmux_id": "$" + str(int(live.tmux_id[1:]) + 7), "remote_dir": live.remote_dir + "0"}
        store.put_sync(SESSIONS, key, live.model_copy(update={differs: other[differs]}))
        async with running_sessions(ops, state, root, settings) as again:
            with anyio.fail_after(60):
                await again.recovered()  # the stale record is checked on the target: not alive
                checked, _ = again.list_sessions()
                found = await again.ensure("plain", "work")
                listed, _ = again.list_sessions()
        stored = store.get_sync(SESSIONS, key)
    assert [s.state for s in checked] == ["exited"]
    assert (found.outcome, found.adopted) == ("reattached", True)
    assert found.tmux_session == made.tmux_session
    assert found.remote_dir == made.remote_dir
    assert [(s.name, s.state) for s in listed] == [("work", "alive")]
    assert stored is not None
    assert (stored.tmux_id, stored.remote_dir) == (live.tmux_id, live.remote_dir)
    # nothing was killed or recreated: one remote session, the same shell, its directory still there
    assert tmux_sessions(root) == ["work"]
    after = tmux_as_owner(root, "display-message", "-p", "-t", "=work:", "#{pane_pid}").stdout.strip()
    assert after == shell
    assert await anyio.Path(made.remote_dir).is_dir()
