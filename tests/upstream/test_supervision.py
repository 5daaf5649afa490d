"""Supervision: failures stay inside the Upstream, processes are restarted, backoff is policy-driven."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError
from tenacity import RetryCallState

from tests.fixtures.procs import free_port
from tests.upstream.conftest import FaultServer, StdioFault
from upstream import Backoff, Upstream, UpstreamClosed, UpstreamHealth, UpstreamSettings, UpstreamUnavailable

pytestmark = pytest.mark.anyio


class _Run:
    """Drives one tenacity run of a real `Backoff` policy: ``fail`` failed attempts, then a working one;
    the sleeps tenacity asks for are recorded instead of slept."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    async def outage(self, fail: int) -> list[float]:
        self.sleeps = []
        attempts = iter([False] * fail + [True])

        async def attempt() -> bool:
            return next(attempts)

        assert await self.backoff.retrying(sleep=self.sleep)(attempt) is True
        return self.sleeps


async def test_backoff_grows_geometrically_and_is_capped() -> None:
    run = _Run(Backoff(initial_s=0.5, max_s=4.0, multiplier=2.0, jitter=0.0))
    assert await run.outage(fail=7) == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


async def test_backoff_jitter_only_shortens_delays_by_the_injected_random_fraction() -> None:
    draws = iter([0.0, 0.5, 0.999])
    run = _Run(Backoff(initial_s=1.0, max_s=10.0, multiplier=3.0, jitter=0.5, rand=lambda: next(draws)))
    assert await run.outage(fail=3) == pytest.approx([1.0, 3.0 * 0.75, 9.0 * (1 - 0.5 * 0.999)])


async def test_backoff_reset_starts_over_from_the_initial_delay_after_a_working_attempt() -> None:
    run = _Run(Backoff(initial_s=0.1, max_s=1.0, multiplier=2.0, jitter=0.0))
    assert await run.outage(fail=5) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert await run.outage(fail=2) == pytest.approx([0.1, 0.2])  # a new outage: the run starts over


def test_backoff_survives_huge_failure_counts_without_overflow() -> None:
    backoff = Backoff(initial_s=1.0, max_s=60.0, multiplier=10.0, jitter=0.0)
    state = RetryCallState(backoff.retrying(), None, (), {})
    state.attempt_number = 100_000
    assert backoff(state) == 60.0


def test_backoff_refuses_parameters_that_break_the_cap() -> None:
    with pytest.raises(ValueError, match="invalid backoff"):
        Backoff(initial_s=2.0, max_s=1.0, multiplier=2.0, jitter=0.0)
    with pytest.raises(ValueError, match="invalid backoff"):
        Backoff(initial_s=1.0, max_s=2.0, multiplier=2.0, jitter=1.5)


def test_settings_reject_unknown_fields_and_mismatched_transport_fields(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        UpstreamSettings(name="x", transport="http", url="http://127.0.0.1:1/mcp", include=["a"])  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        UpstreamSettings(name="x", transport="http")
    with pytest.raises(ValidationError):
        UpstreamSettings(name="x", transport="stdio", command=["x"], url="http://127.0.0.1:1/mcp")
    settings = UpstreamSettings(name="x", transport="stdio", command=["x"])
    assert settings.mode == "legacy"
    with pytest.raises(ValidationError):
        settings.name = "y"  # type: ignore[misc]


async def test_real_upstream_backoff_keeps_growing_until_a_working_tools_list_resets_it(
    fault_http: FaultServer,
) -> None:
    (fault_http.state_dir / "break-list").write_text("")
    backoff = Backoff(initial_s=0.02, max_s=0.08, multiplier=2.0, jitter=0.0)
    delays: list[tuple[int, float]] = []

    def seen(h: UpstreamHealth) -> bool:
        if (
            h.state == "down"
            and h.retry_delay_s is not None
            and (h.consecutive_failures, h.retry_delay_s) not in delays
        ):
            delays.append((h.consecutive_failures, h.retry_delay_s))
        return h.consecutive_failures >= 5

    async with Upstream(fault_http.settings(), backoff=backoff) as up:
        with anyio.fail_after(20):
            # The handshake succeeds every time, but tools/list fails: that is not a success.
            health = await up.wait_for(seen)
            assert health.connect_successes == 0
            assert health.last_error_class == "MCPError(-32603)"
            assert health.retry_delay_s == 0.08  # capped
            assert delays[:4] == [(1, 0.02), (2, 0.04), (3, 0.08), (4, 0.08)]
            (fault_http.state_dir / "break-list").unlink()
            health = await up.wait_for(lambda h: h.state == "connected")
        assert health.connect_successes == 1
        assert health.consecutive_failures == 0
        assert health.retry_delay_s is None
        fault_http.kill()  # a new outage starts over from the initial delay
        with anyio.fail_after(20):
            health = await up.wait_for(lambda h: h.consecutive_failures >= 1 and h.state == "down")
        assert health.retry_delay_s == 0.02


async def test_unreachable_upstream_never_breaks_the_host_task_group_and_callers_get_unavailable() -> None:
    settings = UpstreamSettings(
        name="nowhere",
        transport="http",
        url=f"http://127.0.0.1:{free_port()}/mcp",
        call_wait_s=0.3,
        backoff_initial_s=0.02,
        backoff_max_s=0.05,
    )
    up = Upstream(settings)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(up.run)
            await up.wait_for(lambda h: h.connect_attempts >= 3)
            with pytest.raises(UpstreamUnavailable) as info:
                await up.call_tool("echo", {"text": "x"})
            assert info.value.last_error == "ConnectError"
            assert info.value.state in {"starting", "down"}  # never connected yet
            with pytest.raises(UpstreamUnavailable):
                await up.list_tools()
            tg.cancel_scope.cancel()
    assert up.health().state == "stopped"
    assert up.health().attempts_in_flight_max == 1
    with pytest.raises(UpstreamClosed):
        await up.call_tool("echo", {"text": "x"})


async def test_killed_stdio_upstream_is_reaped_and_restarted_and_the_next_call_works(
    fault_stdio: StdioFault,
) -> None:
    async with Upstream(fault_stdio.settings()) as up:
        with anyio.fail_after(20):
            await up.wait_for(lambda h: h.state == "connected")
            first_pid = fault_stdio.kill()
            await up.wait_for(lambda h: h.connect_successes >= 2 and h.state == "connected")
            result = await up.call_tool("count", {"call_id": "after-restart"})
        assert result.is_error is False
        assert fault_stdio.pid() != first_pid
        assert fault_stdio.counts() == {"after-restart": 1}
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)  # reaped: no zombie left behind
        second_pid = fault_stdio.pid()
    with pytest.raises(ProcessLookupError):
        os.kill(second_pid, 0)  # exiting the Upstream stops and reaps the current process


async def test_restarted_http_upstream_is_reconnected_without_operator_action(
    fault_http: FaultServer,
) -> None:
    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            await up.wait_for(lambda h: h.state == "connected")
            fault_http.kill()
            await up.wait_for(lambda h: h.state != "connected")
            await fault_http.start()
            result = await up.call_tool("echo", {"text": "back"})
        assert result.structured_content == {"text": "back"}
        assert up.health().connect_successes >= 2


async def test_a_hung_handshake_is_abandoned_at_connect_timeout_and_recorded() -> None:
    with socket.socket() as listener:  # accepts TCP (backlog) but never answers HTTP
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        settings = UpstreamSettings(
            name="hung",
            transport="http",
            url=f"http://127.0.0.1:{port}/mcp",
            connect_timeout_s=0.3,
            backoff_initial_s=0.02,
            backoff_max_s=0.05,
        )
        async with Upstream(settings) as up:
            with anyio.fail_after(10):
                health = await up.wait_for(lambda h: h.connect_attempts >= 2 and h.state == "down")
    assert health.last_error_class == "ConnectTimeout"
    assert health.connect_successes == 0


@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_a_wedged_idle_upstream_is_noticed_by_liveness_and_reconnected_when_it_recovers(
    fault_http: FaultServer, mode: str, era: str
) -> None:
    pid = fault_http.server_pid()
    # liveness_timeout_s: 10 probe intervals, so a loaded machine's slow pong is not taken for the wedge;
    # connect_timeout_s: attempts made while the server is stopped end (or are answered after SIGCONT)
    settings = fault_http.settings(
        mode=mode, keepalive_interval_s=0.2, liveness_timeout_s=2.0, connect_timeout_s=10
    )
    async with Upstream(settings) as up:
        try:
            with anyio.fail_after(20):
                # a probe answered (a ping; server/discover on 2026-07-28, which has no ping)
                health = await up.wait_for(lambda h: h.last_probe_ok_at is not None)
                assert health.protocol_version == era
                os.kill(pid, signal.SIGSTOP)  # TCP still accepted by the kernel, nothing answers: wedged
                health = await up.wait_for(lambda h: h.state != "connected")
                assert up.health().last_error_class == "LivenessTimeout"
        finally:
            os.kill(pid, signal.SIGCONT)
        with anyio.fail_after(30):
            health = await up.wait_for(lambda h: h.state == "connected" and h.connect_successes >= 2)
            result = await up.call_tool("echo", {"text": "awake"})
        assert result.structured_content == {"text": "awake"}
        assert health.ambiguous_losses == 0  # nothing was in flight: nothing is ambiguous


async def test_liveness_probes_stay_quiet_on_a_healthy_idle_upstream(fault_http: FaultServer) -> None:
    settings = fault_http.settings(keepalive_interval_s=0.05, liveness_timeout_s=2)
    async with Upstream(settings) as up:
        with anyio.fail_after(20):
            await up.wait_for(lambda h: h.state == "connected")
        with anyio.move_on_after(1.0):  # ~20 pings go by
            await up.wait_for(lambda h: h.state != "connected")
        health = up.health()
        assert health.state == "connected"
        assert health.connect_attempts == 1
