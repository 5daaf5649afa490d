"""A stdio upstream's stderr reaches the gateway's stderr only through the redactor, as structured records,
and the gateway's stderr is one JSON format (structlog and standard-library records alike).

The real gateway runs as a subprocess (``serve --http``); its upstreams are the fault upstream over stdio,
which prints a planted secret from its ``env`` on stderr at start and more on demand (``shout``), and a
command that is not on PATH (issue 7: the log and ``gateway_health`` name it, and retries go on).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.gateway.test_relay import upstream_health
from tests.upstream.conftest import FAST_BACKOFF, fault_command
from upstream._stderr import BURST, LINES_PER_S, MAX_LINE_BYTES

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "Stderr-Planted-Secret-5f3a9d1c"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
MISSING = "libtmux-mcp-not-installed-7c1e"
FLOOD = 3 * BURST


@asynccontextmanager
async def mcp_over_http(gw: GatewayProcess) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy", cache=None) as c:
        yield c


def records(gw: GatewayProcess) -> list[dict[str, Any]]:
    """Every stderr line of the gateway, parsed: a line that is not one JSON object fails the test, except
    the human start-up banner (URL, token file) printed before the gateway was ready."""
    banner = {line for line in gw.banner.splitlines() if not line.startswith("{")}
    out = []
    for line in gw.stderr_text().splitlines():
        if line in banner:
            continue
        record = json.loads(line)
        assert isinstance(record, dict), line
        out.append(record)
    return out


def stderr_lines(gw: GatewayProcess) -> list[dict[str, Any]]:
    return [r for r in records(gw) if r.get("event") == "upstream_stderr"]


async def poll(client: Client, name: str, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll gateway_health until upstream ``name`` satisfies ``predicate`` (caller bounds it)."""
    while True:
        up = await upstream_health(client, name)
        if predicate(up):
            return up
        await anyio.sleep(0.05)


AFTER = "after the flood #"


def markers_in(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in lines if r["line"].startswith(AFTER)]


def markers(gw: GatewayProcess) -> list[dict[str, Any]]:
    return markers_in(stderr_lines(gw))


async def shout_until_one_passes(client: Client, gw: GatewayProcess) -> None:
    """Shout ``after the flood #0``, ``#1``, ... one every 3 lines' worth of refill until one of them is
    logged (caller bounds it). One line after the flood is not enough: on a loaded machine the gateway may
    still be reading the flood while the bucket refills, and spend the refill on it; that line is then
    dropped, and nothing after it would ever report the drop. The pacing is the rate bound's refill (not a
    synchronisation): a marker that is dropped or not yet read just means one more is shouted."""
    sent = 0
    while not markers(gw):
        await client.call_tool("shout", {"text": f"{AFTER}{sent}"})
        sent += 1
        with anyio.move_on_after(3 / LINES_PER_S):
            while not markers(gw):  # noqa: ASYNC110 - a file another process writes, polled
                await anyio.sleep(0.02)


async def test_an_upstream_printing_a_planted_secret_on_stderr_leaves_no_clear_copy_in_the_gateway_stderr(
    tmp_path: Path,
) -> None:
    state = tmp_path / "fault"
    state.mkdir()
    argv = fault_command("--state-dir", str(state), "--stdio", "--stderr-env", "FAULT_TOKEN")
    upstreams = [
        {
            "connection": {
                "name": "chatty",
                "transport": "stdio",
                "command": argv,
                "env": {"FAULT_TOKEN": SECRET},
            }
        },
        {"connection": {"name": "missing", "transport": "stdio", "command": [MISSING], **FAST_BACKOFF}},
    ]
    workdir = tmp_path / "gw"
    workdir.mkdir()
    env = {"REMOTEOPS_GATEWAY__UPSTREAMS": json.dumps(upstreams)}
    with run_gateway(workdir, {}, env=env) as gw:
        async with mcp_over_http(gw) as client:
            with anyio.fail_after(30):
                await poll(client, "chatty", lambda u: u["state"] == "connected")
                shouted = await client.call_tool("shout", {"text": f"again: {SECRET}"})
                assert shouted.is_error is not True
                await client.call_tool("shout", {"text": f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}"})
                await client.call_tool("shout", {"text": "long", "length": 3 * MAX_LINE_BYTES})
                await client.call_tool("shout", {"text": "flood", "repeat": FLOOD})
                await shout_until_one_passes(client, gw)
                missing = await poll(client, "missing", lambda u: u["consecutive_failures"] >= 2)
        text = gw.stderr_text()
        every = records(gw)
    assert SECRET not in text  # neither at start (from env) nor later, nor in any other record
    assert AWS_SECRET not in text  # a credential shape the gateway does not know: masked all the same
    assert AWS_SECRET not in (gw.state_dir / "audit.jsonl").read_text()  # relayed arguments: digested

    lines = [r for r in every if r.get("event") == "upstream_stderr"]
    assert {(r["upstream"], r["logger"], r["level"]) for r in lines} == {("chatty", "gateway.relay", "info")}
    assert all("timestamp" in r for r in lines)
    assert "fault upstream starting; my credential is [REDACTED]" in [r["line"] for r in lines]
    assert "again: [REDACTED]" in [r["line"] for r in lines]

    [long] = [r for r in lines if r["line"].startswith("long")]
    assert long["truncated"] is True
    assert len(long["line"]) == MAX_LINE_BYTES

    flood = [r for r in lines if r["line"] == "flood"]
    # The first marker that passed: every line before it on the pipe is a flood line or an earlier marker,
    # and every earlier marker was dropped (markers are shouted in order, each after the previous returned).
    after = min(markers_in(lines), key=lambda r: int(r["line"].removeprefix(AFTER)))
    dropped_markers = int(after["line"].removeprefix(AFTER))
    assert BURST - 5 <= len(flood) < FLOOD  # bounded: the burst passes, the rest is counted, not logged
    # Each passed line reports the drops since the one before it; a slow machine refills the bucket while the
    # flood is still being read, so drops are spread over later flood lines and the first marker that passed.
    dropped = sum(r.get("dropped_before", 0) for r in [*flood, after])
    assert len(flood) + dropped == FLOOD + dropped_markers

    # The command that cannot start is named, in gateway_health and in the log (a standard-library record
    # of the `upstream` package, in the same JSON format), and it keeps being retried with backoff.
    assert MISSING in (missing["last_error"] or "")
    assert missing["last_error_class"] == "FileNotFoundError"
    assert missing["retry_delay_s"] is None or missing["retry_delay_s"] > 0
    failures = [r for r in every if r.get("logger") == "upstream" and MISSING in r.get("event", "")]
    assert len(failures) >= 2
    assert {r["level"] for r in failures} == {"warning"}
