"""The forward tools through the real gateway process: a forward outlives ``kill -9`` of the gateway, the
next gateway adopts it (or marks it lost when its process died meanwhile), and nothing is duplicated."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from remoteops._state import StateStore
from remoteops.forwards.models import ProcessIdentity
from remoteops.forwards.proc import find_by_argv, identity_of, stop_process
from remoteops.forwards.store import FORWARDS
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.sshd, pytest.mark.slow]


def _config(sshd: SshdInstance, state_dir: Path) -> dict[str, Any]:
    return {
        "state_dir": str(state_dir),
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }


async def _call(gw: GatewayProcess, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(gw.url, http_client=http)) as client:  # type: ignore[arg-type]
        result = await client.call_tool(tool, args)
    if result.is_error:
        text = result.content[0].text  # type: ignore[union-attr]
        return True, json.loads(text)["error"]
    assert result.structured_content is not None
    return False, result.structured_content


async def _ok(gw: GatewayProcess, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    failed, out = await _call(gw, tool, args)
    assert not failed, out
    return out


async def test_a_gateway_killed_with_sigkill_is_restarted_and_adopts_live_forwards_and_marks_dead_ones_lost(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    for name in ("gw1", "gw2"):
        (tmp_path / name).mkdir()
    identities: list[ProcessIdentity] = []
    try:
        with anyio.fail_after(120):
            with run_gateway(tmp_path / "gw1", _config(sshd, state_dir)) as gw:
                keep = (await _ok(gw, "forward_create", {"target": "plain", "kind": "dynamic", "name": "k"}))[
                    "forward"
                ]
                doomed = (await _ok(gw, "forward_create", {"target": "plain", "kind": "dynamic"}))["forward"]
                for fwd in (keep, doomed):
                    ident = identity_of(fwd["pid"])
                    assert ident is not None
                    identities.append(ident)
                gw.proc.send_signal(signal.SIGKILL)
                gw.proc.wait(timeout=10)
            assert identity_of(keep["pid"]) == identities[0]  # the forward outlived the gateway
            # kill it behind the gateway's back (a pidfd waits for its exit: no polling)
            assert await stop_process(identities[1], grace_s=5) == "terminated"
            with run_gateway(tmp_path / "gw2", _config(sshd, state_dir)) as gw2:
                listed = {f["id"]: f for f in (await _ok(gw2, "forward_list", {}))["forwards"]}
                assert set(listed) == {keep["id"], doomed["id"]}
                assert (listed[keep["id"]]["state"], listed[keep["id"]]["adopted"]) == ("active", True)
                assert (listed[doomed["id"]]["state"], listed[doomed["id"]]["lost_reason"]) == (
                    "lost",
                    "process_gone",
                )
                again = await _ok(gw2, "forward_create", {"target": "plain", "kind": "dynamic", "name": "k"})
                assert again["reused"] is True
                assert again["forward"]["id"] == keep["id"]
                assert await anyio.to_thread.run_sync(find_by_argv, list(identities[0].argv)) == [keep["pid"]]
                status = await _ok(gw2, "forward_status", {"id": keep["id"]})
                assert status["last_health"]["healthy"] is True
                health = await _ok(gw2, "gateway_health", {})
                assert health["forwards"]["adopted"] == 1
                assert health["forwards"]["lost"] == 1
                closed = await _ok(gw2, "forward_close", {"id": keep["id"]})
                assert (closed["outcome"], closed["signalled"]) == ("terminated", True)
                gone = await _ok(gw2, "forward_close", {"id": doomed["id"]})
                assert (gone["state_before"], gone["outcome"], gone["signalled"]) == (
                    "lost",
                    "not_running",
                    False,
                )
                failed, error = await _call(gw2, "forward_close", {"id": keep["id"]})
                assert failed
                assert error["code"] == "not_found"
    finally:
        for ident in identities:
            await stop_process(ident, grace_s=2)
    store = StateStore(state_dir)
    await store.open()
    assert await store.load_all(FORWARDS) == {}


async def test_a_non_loopback_bind_is_refused_as_policy_denied(sshd: SshdInstance, tmp_path: Path) -> None:
    (tmp_path / "gw").mkdir()
    with anyio.fail_after(60), run_gateway(tmp_path / "gw", _config(sshd, tmp_path / "state")) as gw:
        args = {"target": "plain", "kind": "dynamic", "bind_address": "0.0.0.0"}  # noqa: S104
        failed, error = await _call(gw, "forward_create", args)
        assert failed
        assert (error["code"], error["details"]["reason"]) == ("policy_denied", "bind_not_allowed")
        assert (await _ok(gw, "forward_list", {}))["forwards"] == []
