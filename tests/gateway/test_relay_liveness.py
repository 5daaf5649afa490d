"""A wedged upstream (frozen with SIGSTOP: alive, silent) is found by liveness probes and routed around.

Real processes: the fault upstream over HTTP (frozen and thawed in place) and over stdio (frozen, then
replaced by the supervisor), the gateway in-process behind a real MCP client. The liveness bounds are
small here (the settings allow it); the timings asserted are the ones the issue requires: the call in
flight ends ``upstream_ambiguous`` within the liveness bound, a new call within ``call_wait_s``, the
gateway's own tools answer throughout and ``gateway_health`` shows the loss in time. Whatever is frozen
is thawed (or killed) in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.gateway.test_relay import (
    FAULT_TOOLS,
    Inbox,
    entry,
    error_of,
    poll_upstream,
    serve_gateway,
    upstream_health,
    wait_listed,
)
from tests.upstream.conftest import FaultServer, StdioFault

pytestmark = pytest.mark.anyio

INTERVAL_S = 0.5
LIVENESS_S = 2.0
CALL_WAIT_S = 2.5
SLACK_S = 1.5
"""Scheduling slack on a loaded 2-core machine; every bound asserted is the setting plus this."""
EARLY_SLACK_S = 0.5
"""How much earlier than a whole window minus one interval the loss may come: the last probe answered
before the freeze may be older by a probe's round trip and a late wake-up of the prober (0.2 s was tight
on a loaded machine); still far above an end that is not the liveness bound's (ms after the freeze)."""

LIVENESS = {
    "keepalive_interval_s": INTERVAL_S,
    "liveness_timeout_s": LIVENESS_S,
    "call_wait_s": CALL_WAIT_S,
    "connect_timeout_s": 1.5,
}


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block; SIGCONT it afterwards whatever happened (it may be gone by then)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.fixture
def fault_stdio(tmp_path: Path) -> StdioFault:
    """The fault upstream over stdio (spawned by the gateway), its state under ``tmp_path / "fault"``."""
    state = tmp_path / "fault"
    state.mkdir()
    return StdioFault(state)


async def counted(fault: StdioFault, call_id: str) -> None:
    """Poll the fault upstream's count file until ``call_id`` ran (a stdio upstream has no side channel;
    the caller bounds the wait)."""
    while True:
        if fault.counts().get(call_id) == 1:
            return
        await anyio.sleep(0.05)


async def own_tool_answers(client: Client) -> None:
    """gateway_health (an own tool) answers promptly, whatever the upstream does."""
    with anyio.fail_after(SLACK_S):
        result = await client.call_tool("gateway_health", {})
    assert result.is_error is not True


@pytest.mark.slow
async def test_a_frozen_http_upstream_ends_the_call_in_flight_as_ambiguous_in_time_and_recovers_on_sigcont(
    tmp_path: Path, fault: FaultServer
) -> None:
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault, LIVENESS)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
        outcome: dict[str, Any] = {}

        async def in_flight() -> None:
            result = await client.call_tool("slow", {"call_id": "wedged-1"})  # never released
            outcome["error"] = error_of(result)
            outcome["at"] = anyio.current_time()

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_flight)
            with anyio.fail_after(10):
                assert (await fault.control("GET", "/control/started", call_id="wedged-1")).status_code == 200
            with frozen(fault.server_pid()):
                t0 = anyio.current_time()
                with anyio.fail_after(LIVENESS_S + SLACK_S):
                    # the loss shows as "reconnecting" a moment before the supervisor records its cause
                    lost = await poll_upstream(
                        client, lambda u: u["state"] != "connected" and u["last_error_class"] is not None
                    )
                health_at = anyio.current_time() - t0
                assert lost["last_error_class"] == "LivenessTimeout"
                await own_tool_answers(client)

                with anyio.fail_after(LIVENESS_S + SLACK_S):
                    while "at" not in outcome:
                        await own_tool_answers(client)
                        await anyio.sleep(0.1)
                ended_at = outcome["at"] - t0
                assert outcome["error"]["code"] == "upstream_ambiguous"
                assert outcome["error"]["details"]["cause"] == "LivenessTimeout"
                assert outcome["error"]["details"]["may_have_run"] is True

                asked = anyio.current_time()
                with anyio.fail_after(CALL_WAIT_S + SLACK_S):
                    late = await client.call_tool("echo", {"text": "into the freeze"})
                waited = anyio.current_time() - asked
                assert error_of(late)["code"] == "upstream_unavailable"
                await own_tool_answers(client)

        # The bounds: no earlier than a whole liveness window minus one probe interval (the last answer
        # came at most that long before the freeze, plus a probe's round trip and a late wake-up of the
        # prober on a loaded machine: EARLY_SLACK_S), no later than the window plus slack; the new caller
        # waited call_wait_s, not longer.
        assert LIVENESS_S - INTERVAL_S - EARLY_SLACK_S <= ended_at <= LIVENESS_S + SLACK_S
        assert health_at <= LIVENESS_S + SLACK_S
        assert CALL_WAIT_S - 0.2 <= waited <= CALL_WAIT_S + SLACK_S

        with anyio.fail_after(30):  # thawed: it reconnects by itself
            up = await poll_upstream(
                client, lambda u: u["state"] == "connected" and u["connect_successes"] >= 2
            )
            back = await client.call_tool("echo", {"text": "thawed"})
        assert back.structured_content == {"text": "thawed"}
        assert up["ambiguous_losses"] == 1
    assert fault.counts() == {"wedged-1": 1}  # ran once, never re-sent


@pytest.mark.slow
async def test_a_frozen_stdio_upstream_is_declared_lost_in_time_and_replaced_by_a_fresh_process(
    tmp_path: Path, fault_stdio: StdioFault
) -> None:
    inbox = Inbox()
    conn = fault_stdio.settings(**{**LIVENESS, "connect_timeout_s": 15.0, "call_wait_s": 15.0}).model_dump(
        mode="json"
    )
    async with serve_gateway(tmp_path, inbox, upstreams=[{"connection": conn}]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, FAULT_TOOLS)
        pid = fault_stdio.pid()
        outcome: dict[str, Any] = {}

        async def in_flight() -> None:
            result = await client.call_tool("work", {"call_id": "stdio-wedged", "seconds": 600})
            outcome["error"] = error_of(result)
            outcome["at"] = anyio.current_time()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(in_flight)
                with anyio.fail_after(10):
                    await counted(fault_stdio, "stdio-wedged")
                os.kill(pid, signal.SIGSTOP)
                t0 = anyio.current_time()
                with anyio.fail_after(LIVENESS_S + SLACK_S):
                    while "at" not in outcome:
                        await own_tool_answers(client)
                        await anyio.sleep(0.1)
            assert outcome["error"]["code"] == "upstream_ambiguous"
            assert outcome["at"] - t0 <= LIVENESS_S + SLACK_S
            with anyio.fail_after(15 + SLACK_S):  # within call_wait_s: the frozen process is replaced
                again = await client.call_tool("count", {"call_id": "stdio-after"})
            assert again.is_error is not True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        up = await upstream_health(client, "fault-stdio")
        assert up["connect_successes"] >= 2
        assert fault_stdio.pid() != pid
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the frozen one was killed and reaped by the supervisor
    assert fault_stdio.counts() == {"stdio-wedged": 1, "stdio-after": 1}


@pytest.mark.slow
async def test_probes_answered_through_a_call_of_four_liveness_windows_keep_the_call_and_the_connection(
    tmp_path: Path, fault_stdio: StdioFault
) -> None:
    inbox = Inbox()
    settings = {"keepalive_interval_s": 1.0, "liveness_timeout_s": 3.0}
    call_s = 12  # four whole liveness windows: a call outlasting the window is not a lost upstream
    conn = fault_stdio.settings(**settings).model_dump(mode="json")
    async with serve_gateway(tmp_path, inbox, upstreams=[{"connection": conn}]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"work"})
        started = anyio.current_time()
        with anyio.fail_after(call_s + 20):
            result = await client.call_tool("work", {"call_id": "long", "seconds": call_s})
        took = anyio.current_time() - started
        up = await upstream_health(client, "fault-stdio")
    assert result.is_error is not True, result
    assert took >= call_s
    assert up["state"] == "connected"
    assert up["connect_attempts"] == 1  # never declared lost
    assert up["ambiguous_losses"] == 0
    assert up["last_probe_ok_at"] is not None
    assert fault_stdio.counts() == {"long": 1}


async def test_a_call_timeout_on_a_frozen_upstream_ends_at_the_limit_it_reports(
    tmp_path: Path, fault: FaultServer
) -> None:
    limit_s = 1.0
    conn = {"call_timeout_s": limit_s, "keepalive_interval_s": 10.0, "liveness_timeout_s": 30.0}
    inbox = Inbox()
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault, conn)]) as (client, _):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"echo"})
        with frozen(fault.server_pid()):
            started = anyio.current_time()
            with anyio.fail_after(limit_s + 10):
                result = await client.call_tool("echo", {"text": "into the freeze"})
            took = anyio.current_time() - started
    error = error_of(result)
    assert error["code"] == "upstream_ambiguous"
    assert error["details"]["timeout_s"] == limit_s  # the limit that applied...
    assert error["details"]["elapsed_s"] <= limit_s + SLACK_S  # ...is when it ended, cleanup or not
    assert took <= limit_s + SLACK_S
