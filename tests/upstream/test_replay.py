"""No replay after ambiguous loss; exactly one retry after a definitive "session not found"."""

from __future__ import annotations

import anyio
import pytest

from tests.upstream.conftest import FaultServer, StdioFault
from upstream import (
    Upstream,
    UpstreamAmbiguous,
    UpstreamError,
    UpstreamSessionLost,
    UpstreamUnavailable,
)

pytestmark = pytest.mark.anyio


async def test_call_killed_mid_flight_raises_ambiguous_ran_once_and_next_call_after_restart_succeeds(
    fault_http: FaultServer,
) -> None:
    async with Upstream(fault_http.settings()) as up:
        caught: list[BaseException] = []

        async def slow_call() -> None:
            try:
                await up.call_tool("slow", {"call_id": "k1"})
            except UpstreamError as exc:
                caught.append(exc)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_call)
                started = await fault_http.control("GET", "/control/started", call_id="k1")
                assert started.status_code == 200
                await fault_http.kill_via_control()

            [exc] = caught
            assert isinstance(exc, UpstreamAmbiguous)
            assert exc.tool == "slow"
            assert exc.retryable is False
            assert exc.elapsed_s >= 0
            assert exc.cause in {"ConnectionClosed", "RemoteProtocolError", "ReadError"}
            assert fault_http.counts() == {"k1": 1}

            await fault_http.start()
            result = await up.call_tool("count", {"call_id": "after"})
        assert result.is_error is False
        assert fault_http.counts() == {"k1": 1, "after": 1}
        health = up.health()
        assert health.ambiguous_losses == 1
        assert health.connect_successes >= 2


async def test_stdio_call_that_kills_the_server_is_ambiguous_and_not_replayed(
    fault_stdio: StdioFault,
) -> None:
    async with Upstream(fault_stdio.settings()) as up:
        with anyio.fail_after(20):
            with pytest.raises(UpstreamAmbiguous) as info:
                await up.call_tool("die", {"call_id": "d1"})
            assert info.value.tool == "die"
            result = await up.call_tool("count", {"call_id": "d2"})
        assert result.is_error is False
        assert fault_stdio.counts() == {"d1": 1, "d2": 1}


async def test_forgotten_session_is_retried_exactly_once_and_succeeds(fault_http: FaultServer) -> None:
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            await up.wait_for(lambda h: h.state == "connected")
            response = await fault_http.control("POST", "/control/forget", times=1)
            assert response.json() == {"forget_budget": 1}
            result = await up.call_tool("count", {"call_id": "s1"})
        assert result.is_error is False
        assert fault_http.counts() == {"s1": 1}
        health = up.health()
        assert health.session_not_found_retries == 1
        assert health.ambiguous_losses == 0
        assert health.connect_successes == 2


async def test_session_forgotten_twice_in_a_row_is_not_retried_again(fault_http: FaultServer) -> None:
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            await up.wait_for(lambda h: h.state == "connected")
            await fault_http.control("POST", "/control/forget", times=2)
            with pytest.raises(UpstreamSessionLost) as info:
                await up.call_tool("count", {"call_id": "s2"})
            assert info.value.retryable is True
            assert up.health().session_not_found_retries == 1
            assert fault_http.counts() == {}
            # The upstream is fine again: the next call goes through on a fresh session.
            result = await up.call_tool("count", {"call_id": "s3"})
        assert result.is_error is False
        assert fault_http.counts() == {"s3": 1}


async def test_fifty_callers_during_an_outage_share_one_reconnect_attempt_and_get_unavailable_in_bound(
    fault_http: FaultServer,
) -> None:
    wait_s = 1.0
    async with Upstream(fault_http.settings(call_wait_s=wait_s)) as up:
        with anyio.fail_after(20):
            await up.wait_for(lambda h: h.state == "connected")
        fault_http.kill()
        outcomes: list[tuple[BaseException | None, float]] = []

        async def caller(i: int) -> None:
            start = anyio.current_time()
            try:
                await up.call_tool("count", {"call_id": f"c{i}"})
            except UpstreamError as exc:
                outcomes.append((exc, anyio.current_time() - start))
            else:
                outcomes.append((None, anyio.current_time() - start))

        with anyio.fail_after(wait_s + 10):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(caller, i)

        assert len(outcomes) == 50
        for exc, elapsed in outcomes:
            assert isinstance(exc, UpstreamUnavailable)
            assert exc.retryable is True
            # call_wait_s plus headroom for a loaded machine's loop stalls
            assert elapsed <= wait_s + 3.0
        # the outage is being reconnected (under load the attempt may start after the callers gave up)
        with anyio.fail_after(10):
            await up.wait_for(lambda h: h.connect_attempts >= 2)
        health = up.health()
        assert health.attempts_in_flight_max == 1
        assert health.ambiguous_losses == 0
        assert fault_http.counts() == {}
