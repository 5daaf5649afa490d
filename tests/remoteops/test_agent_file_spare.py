"""The spare file worker: once the agent has done file work it forks the next request's worker while it is
idle, so a small request waits for no fork. The agent runs locally through the real loader; the target is
this machine, so the tests read its process table."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import anyio
import pytest

from remoteops.agent import program as proto
from tests.fixtures.procs import wait_gone
from tests.remoteops.test_agent_isolation import _children
from tests.remoteops.test_agent_protocol import local_agent
from tests.remoteops.test_agent_spare import _agent_pid
from tests.remoteops.test_files_agent import ask, wire

pytestmark = pytest.mark.anyio


async def _idle_children(agent_pid: int, count: int) -> set[int]:
    """The agent's children once there are ``count`` of them (bounded wait)."""
    with anyio.fail_after(10):
        while len(children := set(_children(agent_pid))) != count:  # noqa: ASYNC110 - the process table
            await anyio.sleep(0.02)
    return children


async def _stat(agent: object, rid: int, path: Path) -> dict[str, object]:
    answer = await ask(agent, rid, proto.STAT, {"path": wire(path)})  # type: ignore[arg-type]
    assert answer[1] == proto.RESULT, answer
    assert answer[3] is not None
    return answer[3]


async def test_after_a_first_file_request_the_next_is_answered_by_a_worker_forked_before_it(
    tmp_path: Path,
) -> None:
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        [supervisor] = await _idle_children(agent_pid, 1)  # the spare supervisor, forked after HELLO
        first = await _stat(agent, 1, tmp_path)
        [spare] = await _idle_children(agent_pid, 2) - {supervisor}
        second = await _stat(agent, 2, tmp_path)
        await wait_gone(spare)  # it answered the request and ended
        [following] = await _idle_children(agent_pid, 2) - {supervisor}
    assert first == second
    assert first["type"] == "directory"
    assert following != spare


async def test_a_spare_killed_before_its_request_leaves_it_to_a_worker_forked_for_it(tmp_path: Path) -> None:
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        [supervisor] = await _idle_children(agent_pid, 1)
        await _stat(agent, 1, tmp_path)
        [spare] = await _idle_children(agent_pid, 2) - {supervisor}
        os.kill(spare, signal.SIGKILL)
        await wait_gone(spare)
        answer = await _stat(agent, 2, tmp_path)
    assert answer["type"] == "directory"


async def test_a_write_too_big_for_the_spares_pipe_retires_it_and_is_still_written(tmp_path: Path) -> None:
    content = os.urandom(300_000)  # more than a pipe holds (64 KiB)
    target = tmp_path / "big.bin"
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        [supervisor] = await _idle_children(agent_pid, 1)
        await _stat(agent, 1, tmp_path)
        [spare] = await _idle_children(agent_pid, 2) - {supervisor}
        wrote = await ask(agent, 2, proto.WRITE, {"path": wire(target)}, content)
        await wait_gone(spare)  # retired: it read no request, did nothing, and ended
    assert wrote[1] == proto.RESULT, wrote
    assert wrote[3] is not None
    assert wrote[3]["sha256"] == hashlib.sha256(content).hexdigest()
    assert target.read_bytes() == content


async def test_an_idle_spare_worker_ends_with_the_agent(tmp_path: Path) -> None:
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        [supervisor] = await _idle_children(agent_pid, 1)
        await _stat(agent, 1, tmp_path)
        spares = await _idle_children(agent_pid, 2)
        assert agent.proc.stdin is not None
        await agent.proc.stdin.aclose()
        with anyio.fail_after(10):
            assert await agent.proc.wait() == 0
    assert supervisor in spares
    for pid in spares:
        await wait_gone(pid)
