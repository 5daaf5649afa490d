"""A wedged agent (its process on the target frozen with SIGSTOP: alive, connected, silent) ends the waits of
the task and session programs as ``CommandTimeout`` (the gateway's ``timeout``), never as a bare
``TimeoutError`` (which the gateway can only report as ``internal_error``). Against the real sshd: the target
is this machine, so the agent's pid is stopped directly.

The carrier's own ceiling is set far beyond the wire's (``kill_after_s`` = 30), so the wire's local bound is
what ends the wait; the wire's grace beyond the remote limit is shortened from 15 s to 1 s so the test waits
3 s instead of 17 s (the bound's arithmetic, not its meaning, is changed)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import remoteops.sessions.wire
import remoteops.tasks.wire
from gateway._errmap import translate
from gateway._errors import ErrorCode
from remoteops import CommandTimeout, RemoteOps, TransportSettings
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.session_helpers import running_sessions, session_root
from tests.remoteops.task_helpers import remote_root, running_tasks, start_sh

pytestmark = [pytest.mark.sshd, pytest.mark.anyio, pytest.mark.slow]

LIMIT_S = 2.0  # the operator's exec ceiling: every task and session program runs with this remote limit


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block; SIGCONT it afterwards whatever happened (it may be gone by then)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


async def _agent_pid(ops: RemoteOps) -> int:
    state = await ops.prepare("plain")
    assert state.carrier == "agent"
    assert state.agent_pid is not None
    return state.agent_pid


# the agent carrier only (no fallback to ssh), programs limited to LIMIT_S, a carrier ceiling far beyond
OVERRIDES = {
    "carrier": "agent",
    "exec_timeout_default_s": LIMIT_S,
    "exec_timeout_max_s": LIMIT_S,
    "kill_after_s": 30,
}


@pytest.fixture
def transport(settings: TransportSettings) -> TransportSettings:
    return TransportSettings.model_validate(settings.model_copy(update=OVERRIDES).model_dump())


def _assert_public_timeout(exc: CommandTimeout) -> None:
    assert exc.target == "plain"
    assert exc.remote_killed is False
    failure = translate(exc)
    assert failure is not None
    assert failure.code is ErrorCode.TIMEOUT


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remoteops.sessions.wire, "_LOCAL_GRACE_S", 1.0)
    monkeypatch.setattr(remoteops.tasks.wire, "_LOCAL_GRACE_S", 1.0)


@pytest.mark.usefixtures("short_grace")
async def test_session_ensure_while_the_agent_is_wedged_ends_as_a_command_timeout(
    ops_factory: OpsFactory, transport: TransportSettings, tmp_path: Path
) -> None:
    with session_root() as root:
        async with (
            ops_factory(**OVERRIDES) as ops,
            running_sessions(ops, tmp_path / "state", root, transport) as sessions,
        ):
            pid = await _agent_pid(ops)
            with frozen(pid), pytest.raises(CommandTimeout) as caught:
                with anyio.fail_after(LIMIT_S + 1.0 + 10):  # the wire's bound, with room for the cancel
                    await sessions.ensure("plain", "wedged")
    _assert_public_timeout(caught.value)


@pytest.mark.usefixtures("short_grace")
async def test_a_task_wait_while_the_agent_is_wedged_ends_as_a_command_timeout(
    ops_factory: OpsFactory, transport: TransportSettings, tmp_path: Path
) -> None:
    with remote_root() as root:
        async with (
            ops_factory(**OVERRIDES) as ops,
            running_tasks(ops, tmp_path / "state", root, transport) as tasks,
        ):
            info = await start_sh(tasks, "sleep 30")
            pid = await _agent_pid(ops)
            with frozen(pid), pytest.raises(CommandTimeout) as caught:
                with anyio.fail_after(LIMIT_S + 1.0 + 10):
                    await tasks.wait(info.id, timeout_s=0)
            await tasks.cancel(info.id)  # the agent answers again: the task ends here, not at cleanup
    _assert_public_timeout(caught.value)
