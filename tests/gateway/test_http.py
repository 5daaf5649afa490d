"""The real gateway over HTTP (uvicorn on loopback, started as a subprocess): guard, auth, health, eras."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from acceptance.harness.raw_mcp import ACCEPT, INIT
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway

pytestmark = pytest.mark.slow  # every test talks to a real gateway subprocess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with run_gateway(tmp_path_factory.mktemp("gw")) as gw:
        yield gw


def _post(gw: GatewayProcess, **kw: object) -> httpx.Response:
    headers = {**ACCEPT, **gw.headers(), **kw.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(gw.url, headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def test_token_file_is_generated_private(gateway: GatewayProcess) -> None:
    token_file = Path(gateway.info["token_file"])
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert gateway.token is not None
    assert len(gateway.token) >= 32


def test_a_hostile_host_header_gets_421(gateway: GatewayProcess) -> None:
    r = _post(gateway, json=INIT, headers={"Host": "evil.example:80"})
    assert r.status_code == 421


def test_a_foreign_origin_gets_403(gateway: GatewayProcess) -> None:
    r = _post(gateway, json=INIT, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403


def test_an_oversized_body_gets_413(gateway: GatewayProcess) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (300 * 1024) + b'"}}'
    r = _post(gateway, content=body)
    assert r.status_code == 413


@pytest.mark.parametrize("auth", [None, "Bearer wrong-token-123456789", "Basic Zm9vOmJhcg=="])
def test_no_or_wrong_token_gets_401_invalid_token_and_no_pretence_of_oauth(
    gateway: GatewayProcess, auth: str | None
) -> None:
    headers = dict(ACCEPT)
    if auth:
        headers["Authorization"] = auth
    r = httpx.post(gateway.url, headers=headers, json=INIT, timeout=10)
    assert r.status_code == 401
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert "resource_metadata" not in challenge  # no authorization server is named: this is no OAuth
    assert gateway.token not in r.text
    for well_known in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-authorization-server",
    ):
        assert httpx.get(gateway.base + well_known, timeout=10).status_code == 404


def test_healthz_answers_without_auth_and_says_nothing_else(gateway: GatewayProcess) -> None:
    r = httpx.get(gateway.base + "/healthz", timeout=10)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


async def _client(gw: GatewayProcess, mode: str) -> tuple[list[str], str | None, str]:
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        tools = await client.list_tools()
        result = await client.call_tool("gateway_health", {})
        assert result.is_error is not True
        return [t.name for t in tools.tools], client.instructions, client.protocol_version


@pytest.mark.anyio
async def test_a_good_token_lists_and_calls_tools_in_the_handshake_era(gateway: GatewayProcess) -> None:
    names, instructions, version = await _client(gateway, "legacy")
    assert "gateway_health" in names
    assert version == "2025-11-25"
    assert instructions is not None
    assert "remoteops-gateway" in instructions


@pytest.mark.anyio
async def test_a_good_token_lists_and_calls_tools_in_the_stateless_2026_era(gateway: GatewayProcess) -> None:
    names, _, version = await _client(gateway, "2026-07-28")
    assert "gateway_health" in names
    assert version == "2026-07-28"


def test_turning_auth_off_needs_the_explicit_flag(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="allow_no_auth"),
        run_gateway(tmp_path, {"auth": {"mode": "none"}}),
    ):
        pass


def test_auth_can_be_turned_off_explicitly_on_loopback(tmp_path: Path) -> None:
    with run_gateway(tmp_path, {"auth": {"mode": "none", "allow_no_auth": True}}) as gw:
        assert gw.token is None
        r = httpx.post(gw.url, headers=ACCEPT, json=INIT, timeout=10)
        assert r.status_code == 200


def test_sd_notify_ready_watchdog_stopping_and_a_clean_exit(tmp_path: Path) -> None:
    # A private directory, not a fixed /tmp/rog-n-<pid>.sock another (crashed) run may have left.
    directory = tempfile.mkdtemp(prefix="rogn-", dir="/tmp")  # short: AF_UNIX paths end at 108 bytes
    path = f"{directory}/notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    try:
        env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"}
        with run_gateway(tmp_path, env=env) as gw:
            first = sock.recv(4096).decode()
            assert first.startswith("READY=1\n")
            assert "STATUS=serving MCP at " + gw.url in first
            # Two pings. Each needs /healthz to answer within the 0.2 s interval; a loaded machine may miss
            # one, which the gateway reports as a STATUS= line instead: not a ping, and not a failure here.
            pings = 0
            while pings < 2:
                msg = sock.recv(4096).decode()
                assert msg == "WATCHDOG=1" or msg.startswith("STATUS="), msg
                pings += msg == "WATCHDOG=1"
            gw.proc.send_signal(signal.SIGTERM)
            messages = []
            while True:
                msg = sock.recv(4096).decode()
                messages.append(msg)
                if msg.startswith("STOPPING=1"):
                    break
            assert gw.proc.wait(timeout=20) == 0
    finally:
        sock.close()
        Path(path).unlink(missing_ok=True)
        os.rmdir(directory)


def test_auth_off_is_refused_on_a_non_loopback_bind_even_with_the_flag(tmp_path: Path) -> None:
    config = {"server": {"host": "0.0.0.0"}, "auth": {"mode": "none", "allow_no_auth": True}}  # noqa: S104
    with pytest.raises(RuntimeError, match="loopback"), run_gateway(tmp_path, config):
        pass


def test_explicit_host_and_origin_allow_lists_replace_the_loopback_defaults(tmp_path: Path) -> None:
    config = {
        "server": {"allowed_hosts": ["gw.example.net:443"], "allowed_origins": ["https://gw.example.net"]},
    }
    with run_gateway(tmp_path, config) as gw:
        proxied = {"Host": "gw.example.net:443", "Origin": "https://gw.example.net"}
        assert _post(gw, json=INIT, headers=proxied).status_code == 200
        assert _post(gw, json=INIT, headers={**proxied, "Origin": "http://127.0.0.1:1"}).status_code == 403
        assert _post(gw, json=INIT).status_code == 421  # the loopback default is gone, not added to
