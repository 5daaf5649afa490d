"""Rotated upstream credentials stay redacted: a bearer token file read again on reconnect is registered
with the gateway's redactor each time, before it is used (real fault upstream over HTTP, in-process
gateway; what is checked is the audit log, written through that redactor)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.gateway.conftest import read_audit
from tests.gateway.test_relay import Inbox, entry, poll_upstream, serve_gateway, wait_listed
from tests.upstream.conftest import FaultServer

pytestmark = pytest.mark.anyio

FIRST = "Upstream-Token-First-3b9e71"
ROTATED = "Upstream-Token-Rotated-a4c2d8"


async def test_a_bearer_token_rotated_between_connections_is_redacted_like_the_first(
    tmp_path: Path, fault: FaultServer
) -> None:
    token_file = tmp_path / "upstream-token"
    token_file.write_text(FIRST + "\n")
    inbox = Inbox()
    # probed often: the idle connection's loss is seen in a fraction of a second, not at the 10 s default
    conn = {"bearer_token_file": str(token_file), "keepalive_interval_s": 0.2, "liveness_timeout_s": 5.0}
    async with serve_gateway(tmp_path, inbox, upstreams=[entry(fault, conn)]) as (client, rt):
        with anyio.fail_after(30):
            await wait_listed(client, inbox, {"count"})
            first = await client.call_tool("count", {"call_id": FIRST})
        token_file.write_text(ROTATED + "\n")  # rotated; read again on the next connect
        fault.kill()
        await fault.start()
        with anyio.fail_after(30):
            await poll_upstream(client, lambda u: u["state"] == "connected" and u["connect_successes"] >= 2)
            rotated = await client.call_tool("count", {"call_id": ROTATED})
        audit = await read_audit(rt)
    assert first.is_error is not True
    assert rotated.is_error is not True
    assert fault.counts() == {FIRST: 1, ROTATED: 1}  # the calls carried the tokens to the upstream...
    relayed = [json.loads(line) for line in audit.splitlines() if '"toolset": "upstream"' in line]
    assert [r["tool"] for r in relayed] == ["count", "count"]
    assert FIRST not in audit  # ...and the audit record of each has it redacted
    assert ROTATED not in audit
