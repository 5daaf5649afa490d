"""The spare supervisor: the agent forks the next call's supervisor while it is idle, so a call starts one
process (its command) instead of two. The agent runs locally through the real loader; the target is this
machine, so the tests read its process table."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from remoteops.agent import program as proto
from tests.fixtures.procs import wait_gone
from tests.remoteops.test_agent_isolation import _children
from tests.remoteops.test_agent_protocol import BASE, Agent, _hello, local_agent

pytestmark = pytest.mark.anyio

PPID = ["sh", "-c", 'echo "$PPID"']  # the command's parent: the supervisor that ran it


async def _spare_of(agent_pid: int, *, not_: int = 0) -> int:
    """The agent's one idle child (its spare supervisor), other than ``not_`` (bounded wait)."""
    with anyio.fail_after(10):
        while True:
            children = [pid for pid in _children(agent_pid) if pid != not_]
            if len(children) == 1:
                return children[0]
            await anyio.sleep(0.02)


async def _agent_pid(agent: Agent) -> int:
    hello = await _hello(agent)
    assert hello[3] is not None
    return int(hello[3]["pid"])


async def _ppid_of_run(agent: Agent, rid: int, **meta: object) -> int:
    await agent.send(proto.encode(rid, proto.EXEC, {**BASE, "argv": PPID, **meta}))
    result = await agent.final(rid)
    assert result[1] == proto.RESULT
    assert result[3] is not None
    assert result[3]["exit"] == 0
    return int(result[4])


async def test_a_call_is_run_by_the_supervisor_forked_before_it_arrived_and_the_next_spare_follows() -> None:
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        spare = await _spare_of(agent_pid)
        ran_under = await _ppid_of_run(agent, 1)
        following = await _spare_of(agent_pid, not_=spare)
        second = await _ppid_of_run(agent, 2)
    assert ran_under == spare
    assert following != spare
    assert second == following


async def test_a_spare_killed_before_its_call_leaves_the_call_to_a_supervisor_forked_for_it() -> None:
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        spare = await _spare_of(agent_pid)
        os.kill(spare, signal.SIGKILL)
        await wait_gone(spare)  # dead (its pipe has no reader), whether or not the agent reaped it yet
        ran_under = await _ppid_of_run(agent, 1)
    assert ran_under != spare


async def test_a_call_too_big_for_the_spares_pipe_retires_it_and_still_runs() -> None:
    big = {"ROG_BIG": "x" * 100_000}  # more than a pipe holds (64 KiB), less than exec allows one string
    async with local_agent("python3") as agent:
        agent_pid = await _agent_pid(agent)
        spare = await _spare_of(agent_pid)
        ran_under = await _ppid_of_run(agent, 1, env=big)
        await wait_gone(spare)  # retired: it read no call, ran nothing, and ended
    assert ran_under != spare


async def test_an_idle_spare_ends_with_the_agent_whether_its_stdin_closes_or_it_is_killed() -> None:
    for how in ("stdin", "sigkill"):
        async with local_agent("python3") as agent:
            agent_pid = await _agent_pid(agent)
            spare = await _spare_of(agent_pid)
            if how == "stdin":
                assert agent.proc.stdin is not None
                await agent.proc.stdin.aclose()
            else:
                os.kill(agent_pid, signal.SIGKILL)
            await wait_gone(spare)
