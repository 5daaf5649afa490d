"""A cold burst does not starve the agent's boot: against an sshd with ``MaxSessions 2`` (below the pool's
``max_channels_per_target`` of 8, so the master refuses sessions beyond two), a burst of concurrent execs on
a fresh RemoteOps all succeed, the agent boots during the burst (the calls arriving while it boots wait for
it instead of each taking a session of their own) and carries the rest of the burst and what follows,
file requests included. A dedicated sshd instance (tests/fixtures/sshd.py, ``max_sessions=2``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import anyio
import pytest

from remoteops import RemoteOps, TargetSpec, TransportSettings
from remoteops.agent import program as proto
from tests.fixtures.sshd import SshdInstance, sshd_unavailable_reason, start_sshd

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

BURST = 256


@pytest.fixture(scope="module")
def sshd_two_sessions() -> Iterator[SshdInstance]:
    reason = sshd_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with start_sshd(max_sessions=2) as instance:
        yield instance


async def test_a_cold_burst_against_max_sessions_2_all_succeeds_and_the_agent_boots_and_carries_it(
    sshd_two_sessions: SshdInstance,
) -> None:
    sshd = sshd_two_sessions
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    outputs: dict[int, bytes] = {}
    carriers: Counter[str] = Counter()

    async def one(ops: RemoteOps, i: int) -> None:
        raw = await ops.exec_raw("plain", ["echo", str(i)])
        assert raw.exit_code == 0
        outputs[i] = raw.stdout.head
        carriers[raw.carrier] += 1

    async with RemoteOps(settings, [TargetSpec(name="plain", host=sshd.alias("plain"))]) as ops:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(BURST):
                    tg.start_soon(one, ops, i)
            stats = ops.stats()
            state = stats.carriers["plain"]
            after = await ops.exec_raw("plain", ["echo", "after"])
            meta, _ = await ops.agent_request("plain", proto.STAT, {"path": "/"})
            latest = ops.stats().carriers["plain"]
    assert outputs == {i: f"{i}\n".encode() for i in range(BURST)}
    assert state.carrier == "agent"
    assert state.agent_alive
    assert state.reason is None  # the boot was never refused for good
    assert state.channels_started == 1
    # the call that found no agent went over ssh and started the boot; those arriving meanwhile waited for it
    assert carriers["agent"] >= BURST - 2, carriers
    assert stats.fallbacks == 0  # no call needed a one-shot connection of its own
    assert after.carrier == "agent"
    assert meta["type"] == "directory"
    assert latest.agent_pid == state.agent_pid
