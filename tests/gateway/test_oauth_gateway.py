"""The real gateway in ``auth.mode = "oauth"`` (a subprocess) against a real authorization server on loopback:
401s, RFC 9728 metadata, least privilege by scope and target, the trusted proxy, the audit's principal."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway._catalog import Toolset
from gateway._dispatch import error_payload
from gateway.tools import all_specs
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import InstalledTool
from tests.fixtures.oauth_server import INTROSPECTION_CLIENT, AuthServer, run_auth_server
from tests.gateway.test_clients import CLIENT_TIMEOUT_S, inspector  # noqa: F401 - the session fixture

pytestmark = [pytest.mark.slow, pytest.mark.anyio]  # a gateway subprocess per module

RESOURCE = "https://gateway.example.test/mcp"
PROXY_PEER = "127.0.0.2"  # the trusted proxy's address; the tests' own requests come from 127.0.0.1
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# From the catalog, so tools that other toolsets gain later are covered without naming them here.
INSPECT_TOOLS = {spec.name for spec in all_specs() if spec.toolset is Toolset.INSPECT}
EXECUTE_TOOLS = {spec.name for spec in all_specs() if spec.toolset is Toolset.EXECUTE}


def _secret_file(path: Path, value: str) -> Path:
    path.write_text(value + "\n", encoding="utf-8")
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="module")
def idp() -> Iterator[AuthServer]:
    with run_auth_server(RESOURCE) as server:
        yield server


@pytest.fixture(scope="module")
def proxy_secret() -> str:
    return "proxy-shared-secret-0123456789"


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory, idp: AuthServer, proxy_secret: str
) -> Iterator[GatewayProcess]:
    work = tmp_path_factory.mktemp("gw-oauth")
    config = {
        "auth": {
            "mode": "oauth",
            "grants": [{"subject": "alice", "targets": ["t1"]}, {"group": "web", "targets": ["t2"]}],
            "oauth": {
                "issuer": idp.issuer,
                "resource": RESOURCE,
                "jwks_url": idp.jwks_url,
                "introspection_url": idp.introspection_url,
                "introspection_client_id": INTROSPECTION_CLIENT,
                "introspection_secret_file": str(_secret_file(work / "introspect", idp.introspection_secret)),
                "leeway_s": 5,
            },
            "trusted_proxy": {
                "peers": [PROXY_PEER],
                "secret_file": str(_secret_file(work / "proxy", proxy_secret)),
                "scopes": ["remoteops:inspect"],
            },
        },
        # Port 1 on loopback: nothing listens, so a call that reached ssh would fail with connect_error.
        "targets": [
            {"name": "t1", "host": "127.0.0.1", "port": 1},
            {"name": "t2", "host": "127.0.0.1", "port": 1},
        ],
    }
    with run_gateway(work, config) as proc:
        yield proc


def _post(gw: GatewayProcess, token: str | None, **headers: str) -> httpx.Response:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(gw.url, json=INIT, headers={**ACCEPT, **auth, **headers}, timeout=10)


def _claims_cases(idp: AuthServer) -> dict[str, str]:
    now = int(time.time())
    return {
        "expired": idp.issue("alice", "remoteops:inspect", exp=now - 60),
        "not_yet_valid": idp.issue("alice", "remoteops:inspect", nbf=now + 600),
        "wrong_issuer": idp.issue("alice", "remoteops:inspect", iss="http://127.0.0.1:1/evil"),
        "wrong_audience": idp.issue("alice", "remoteops:inspect", aud="https://other.example.test/mcp"),
        "alg_none": idp.unsigned("alice", "remoteops:inspect"),
        "garbage": "not-a-token",
    }


def test_a_valid_token_is_accepted_and_bad_ones_get_401_pointing_to_the_metadata(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    assert _post(gw, idp.issue("alice", "remoteops:inspect")).status_code == 200
    statuses = {name: _post(gw, token).status_code for name, token in _claims_cases(idp).items()}
    assert statuses == dict.fromkeys(statuses, 401)
    refused = _post(gw, None)
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    assert "resource_metadata=" in challenge


def test_the_instructions_name_only_the_callers_targets_and_toolsets(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    r = _post(gw, idp.issue("alice", "remoteops:inspect"), Accept="application/json, text/event-stream")
    assert r.status_code == 200
    data = next(line for line in r.text.splitlines() if line.startswith("data:"))
    instructions = json.loads(data.removeprefix("data:"))["result"]["instructions"]
    assert "t1" in instructions
    assert "t2" not in instructions
    assert "Enabled toolsets: inspect." in instructions


def test_the_protected_resource_metadata_names_the_real_authorization_server(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    r = httpx.get(f"{gw.base}/.well-known/oauth-protected-resource/mcp", timeout=10)
    assert r.status_code == 200
    doc = r.json()
    assert doc["resource"] == RESOURCE
    assert doc["authorization_servers"] == [idp.issuer]


async def _client_session(gw: GatewayProcess, headers: dict[str, str], local: str = "127.0.0.1") -> Any:
    transport = httpx2.AsyncHTTPTransport(local_address=local)
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30), transport=transport)


async def _list_and_call(
    gw: GatewayProcess,
    headers: dict[str, str],
    calls: list[tuple[str, dict[str, Any]]],
    local: str = "127.0.0.1",
) -> tuple[set[str], list[Any]]:
    http = await _client_session(gw, headers, local)
    results = []
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        for tool, args in calls:
            results.append(await client.call_tool(tool, args))
    return names, results


def _code(result: Any) -> str | None:
    payload = error_payload(result)
    return None if payload is None else str(payload["code"])


async def test_an_inspect_only_token_sees_and_reaches_only_inspect_tools_and_its_targets(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    token = idp.issue("alice", "remoteops:inspect")
    names, (listed, exec_, other_target) = await _list_and_call(
        gw,
        {"Authorization": f"Bearer {token}"},
        [
            ("target_list", {}),
            ("remote_exec", {"target": "t1", "argv": ["id"]}),
            ("target_capabilities", {"target": "t2"}),
        ],
    )
    assert names == INSPECT_TOOLS
    assert [t["name"] for t in listed.structured_content["targets"]] == ["t1"]
    assert _code(exec_) == "policy_denied"
    assert _code(other_target) == "policy_denied"  # refused before ssh: otherwise connect_error (port 1)


async def test_an_execute_scope_opens_the_execute_tools_but_not_other_targets(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    token = idp.issue("alice", "remoteops:inspect remoteops:execute")
    names, (own_target, other) = await _list_and_call(
        gw,
        {"Authorization": f"Bearer {token}"},
        [("target_capabilities", {"target": "t1"}), ("remote_exec", {"target": "t2", "argv": ["id"]})],
    )
    assert names == INSPECT_TOOLS | EXECUTE_TOOLS
    assert _code(own_target) == "connect_error"  # allowed: it really tried to reach t1
    assert _code(other) == "policy_denied"


async def test_a_caller_matching_no_grant_reaches_no_target(gw: GatewayProcess, idp: AuthServer) -> None:
    token = idp.issue("carol", "remoteops:inspect")
    _, (listed, call) = await _list_and_call(
        gw, {"Authorization": f"Bearer {token}"}, [("target_list", {}), ("target_diagnose", {"target": "t1"})]
    )
    assert listed.structured_content["targets"] == []
    assert _code(call) == "policy_denied"


def _audit(gw: GatewayProcess) -> list[dict[str, Any]]:
    path = gw.state_dir / "audit.jsonl"
    deadline = time.monotonic() + 10  # the audit writer is asynchronous: wait, bounded, for its record
    while True:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        records = [json.loads(line) for line in lines]
        if records or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


async def test_the_audit_record_names_the_oauth_principal(gw: GatewayProcess, idp: AuthServer) -> None:
    token = idp.issue("alice", "remoteops:inspect")
    await _list_and_call(
        gw, {"Authorization": f"Bearer {token}"}, [("remote_exec", {"target": "t1", "argv": ["x"]})]
    )
    records = [r for r in _audit(gw) if r["tool"] == "remote_exec" and r["principal"] == "oauth:alice"]
    assert records
    assert records[-1]["identity"] == {
        "kind": "oauth",
        "subject": "alice",
        "client_id": "client-of-alice",
        "scopes": ["remoteops:inspect"],
    }
    assert records[-1]["error_code"] == "policy_denied"
    denials = [json.loads(line) for line in gw.stderr_text().splitlines() if '"policy_denied"' in line]
    assert any(d.get("principal") == "oauth:alice" and d.get("tool") == "remote_exec" for d in denials)
    assert token not in (gw.state_dir / "audit.jsonl").read_text(encoding="utf-8")


async def test_identity_headers_from_the_trusted_proxy_with_its_secret_name_the_caller(
    gw: GatewayProcess, proxy_secret: str
) -> None:
    headers = {
        "X-Forwarded-User": "dave",
        "X-Forwarded-Groups": "web",
        "X-Remoteops-Proxy-Secret": proxy_secret,
    }
    names, (listed,) = await _list_and_call(gw, headers, [("target_list", {})], local=PROXY_PEER)
    assert names == INSPECT_TOOLS  # the proxy's configured scopes
    assert [t["name"] for t in listed.structured_content["targets"]] == ["t2"]  # the group's grant
    assert any(r["principal"] == "proxy:dave" for r in _audit(gw))


def test_forged_identity_headers_from_a_non_trusted_peer_are_ignored(
    gw: GatewayProcess, idp: AuthServer, proxy_secret: str
) -> None:
    forged = {"X-Forwarded-User": "alice", "X-Remoteops-Proxy-Secret": proxy_secret}
    assert _post(gw, None, **forged).status_code == 401  # right secret, wrong peer: no identity
    with httpx.Client(transport=httpx.HTTPTransport(local_address=PROXY_PEER), timeout=10) as proxied:
        wrong = proxied.post(
            gw.url,
            json=INIT,
            headers={**ACCEPT, "X-Forwarded-User": "alice", "X-Remoteops-Proxy-Secret": "nope"},
        )
    assert wrong.status_code == 401  # right peer, wrong secret
    with httpx.Client(transport=httpx.HTTPTransport(local_address=PROXY_PEER), timeout=10) as proxied:
        twice = proxied.post(
            gw.url,
            json=INIT,
            headers=[
                *ACCEPT.items(),
                ("X-Forwarded-User", "dave"),
                ("X-Forwarded-User", "alice"),
                ("X-Remoteops-Proxy-Secret", proxy_secret),
            ],
        )
    assert twice.status_code == 401  # right peer and secret, but an ambiguous identity
    assert gw.stderr_text().count("identity_headers_ignored") == 1  # logged once, not per request


async def test_a_forged_identity_header_does_not_change_a_token_callers_principal(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    token = idp.issue("bob", "remoteops:inspect")
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-User": "alice", "X-Forwarded-Groups": "web"}
    _, (listed,) = await _list_and_call(gw, headers, [("target_list", {})])
    assert listed.structured_content["targets"] == []  # bob's own (no grant), not alice's or the group's


def test_the_inspector_cli_lists_tools_with_a_real_oauth_token(
    inspector: InstalledTool,  # noqa: F811 - the session fixture imported above
    gw: GatewayProcess,
    idp: AuthServer,
    tmp_path: Path,
) -> None:
    token = idp.issue("alice", "remoteops:inspect remoteops:execute")
    argv = ["--cli", gw.url, "--transport", "http", "--method", "tools/list", "--format", "json"]
    argv += ["--stored-auth-only", "--header", f"Authorization: Bearer {token}"]
    run = inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=tmp_path)
    assert run.returncode == 0, f"{run.describe()}\n--- gateway stderr ---\n{gw.stderr_text()[-4000:]}"
    names = {tool["name"] for tool in json.loads(run.stdout)["result"]["tools"]}
    assert names == INSPECT_TOOLS | EXECUTE_TOOLS
