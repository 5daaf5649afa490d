"""The liveness probe on its own (``remoteops/agent/liveness.py``), with a PING that is never answered and
short bounds: signs of life (bytes read, or a long write the agent keeps taking) extend a probe's bound, and
only silence for the whole bound declares the channel lost; a channel that died is not "lost"."""

from __future__ import annotations

import anyio
import pytest

from remoteops import TransportSettings
from remoteops.agent.liveness import Liveness

pytestmark = pytest.mark.anyio

SETTINGS = TransportSettings(agent_probe_s=0.05, agent_lost_after_s=1.0)


async def test_a_probe_queued_behind_a_long_write_is_not_taken_for_silence_only_silence_is() -> None:
    lost = anyio.Event()
    never = anyio.Event()

    async def ping() -> bool:
        await never.wait()  # queued behind a big payload: no answer while the write goes on
        return True

    liveness = Liveness(SETTINGS, ping, lost.set)
    async with anyio.create_task_group() as tg:
        tg.start_soon(liveness.run)
        with anyio.fail_after(30):
            for _ in range(25):  # 2.5 s of a write making progress: 2.5 times the bound
                liveness.heard()
                await anyio.sleep(0.1)  # the stimulus's pace, not a synchronisation
            assert not lost.is_set()
            assert liveness.alive
            liveness.heard()  # the last sign of life: silence is measured from here
            started = anyio.current_time()
            await lost.wait()  # silence from here: lost after the bound
        tg.cancel_scope.cancel()
    assert anyio.current_time() - started >= SETTINGS.agent_lost_after_s - 0.1
    assert not liveness.alive
    assert not await liveness.check()


async def test_a_channel_that_died_during_a_probe_is_not_declared_lost() -> None:
    lost = anyio.Event()

    async def ping() -> bool:
        return False  # the channel died before the answer came

    liveness = Liveness(SETTINGS, ping, lost.set)
    with anyio.fail_after(10):
        await liveness.run()
    assert not lost.is_set()
    assert not liveness.alive


async def test_a_caller_waits_for_the_probe_of_a_silent_agent_and_learns_its_answer() -> None:
    answers = 0

    async def ping() -> bool:
        nonlocal answers
        answers += 1
        return True

    liveness = Liveness(SETTINGS, ping, lambda: None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(liveness.run)
        with anyio.fail_after(10):
            liveness.last_heard -= 1.0  # nothing heard for longer than agent_probe_s
            assert not liveness.fresh()
            assert await liveness.check()
        tg.cancel_scope.cancel()
    assert answers >= 1
    assert liveness.alive
