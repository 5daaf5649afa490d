"""The real gateway in ``auth.mode = "oauth"`` (a subprocess) against a real authorization server on loopback:
401s, RFC 9728 metadata, least privilege by scope and target, the trusted proxy, the audit's principal."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from acceptance.harness.raw_mcp import (
    ACCEPT,
    INIT,
    INITIALIZED,
    bearer,
    challenge,
    session_headers,
    sse_data,
    tools_call,
)
from gateway._catalog import Toolset
from gateway._dispatch import error_payload
from gateway.config import DEFAULT_SCOPES, Settings
from gateway.tools import all_specs
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import InstalledTool
from tests.fixtures.oauth_server import INTROSPECTION_CLIENT, AuthServer, run_auth_server
from tests.gateway.test_clients import CLIENT_TIMEOUT_S, inspector  # noqa: F401 - the session fixture
from tests.upstream.conftest import fault_command

pytestmark = [pytest.mark.slow, pytest.mark.anyio]  # a gateway subprocess per module

RESOURCE = "https://gateway.example.test/mcp"
METADATA_URL = "https://gateway.example.test/.well-known/oauth-protected-resource/mcp"
PROXY_PEER = "127.0.0.2"  # the trusted proxy's address; the tests' own requests come from 127.0.0.1
# From the catalog, so tools that other toolsets gain later are covered without naming them here.
INSPECT_TOOLS = {spec.name for spec in all_specs() if spec.toolset is Toolset.INSPECT}
# Tools needing a setting these gateways leave out (the transfer tools and upload_many: [transfers]
# local_roots) are not offered.
EXECUTE_TOOLS = {
    spec.name
    for spec in all_specs()
    if spec.toolset is Toolset.EXECUTE and (spec.unavailable is None or spec.unavailable(Settings()) is None)
}


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
    (work / "fault").mkdir()
    fault = fault_command("--state-dir", str(work / "fault"), "--stdio")
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
        # A relayed upstream (over stdio), so that the upstream toolset has tools to hide and refuse.
        "upstreams": [{"connection": {"name": "fault", "transport": "stdio", "command": fault}}],
        # Port 1 on loopback: nothing listens, so a call that reached ssh would fail with connect_error.
        "targets": [
            {"name": "t1", "host": "127.0.0.1", "port": 1},
            {"name": "t2", "host": "127.0.0.1", "port": 1},
        ],
    }
    with run_gateway(work, config) as proc:
        yield proc


def _post(gw: GatewayProcess, token: str | None, **headers: str) -> httpx.Response:
    return httpx.post(gw.url, json=INIT, headers={**ACCEPT, **bearer(token), **headers}, timeout=10)


def _claims_cases(idp: AuthServer) -> dict[str, str]:
    now = int(time.time())
    return {
        "expired": idp.issue("alice", "remoteops:inspect", exp=now - 60),
        "not_yet_valid": idp.issue("alice", "remoteops:inspect", nbf=now + 600),
        "wrong_issuer": idp.issue("alice", "remoteops:inspect", iss="http://127.0.0.1:1/evil"),
        "wrong_audience": idp.issue("alice", "remoteops:inspect", aud="https://other.example.test/mcp"),
        "audience_with_trailing_slash": idp.issue("alice", "remoteops:inspect", aud=RESOURCE + "/"),
        "audience_of_a_child_path": idp.issue("alice", "remoteops:inspect", aud=RESOURCE + "/x"),
        "audience_of_the_origin": idp.issue(
            "alice", "remoteops:inspect", aud="https://gateway.example.test/"
        ),
        "opaque_audience_with_trailing_slash": idp.issue_opaque(
            "alice", "remoteops:inspect", aud=RESOURCE + "/"
        ),
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
    instructions = sse_data(r)["result"]["instructions"]
    assert "t1" in instructions
    assert "t2" not in instructions
    assert "Enabled toolsets: inspect." in instructions


def test_the_protected_resource_metadata_names_the_real_authorization_server_and_the_scopes(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    r = httpx.get(f"{gw.base}/.well-known/oauth-protected-resource/mcp", timeout=10)
    assert r.status_code == 200
    doc = r.json()
    assert doc["resource"] == RESOURCE
    assert doc["authorization_servers"] == [idp.issuer]
    assert doc["scopes_supported"] == list(DEFAULT_SCOPES)
    # What a client does next (RFC 8414): the named server's metadata is the issuer whose keys verify.
    found = httpx.get(f"{doc['authorization_servers'][0]}/.well-known/oauth-authorization-server", timeout=10)
    assert found.status_code == 200
    assert found.json()["issuer"] == idp.issuer
    assert found.json()["jwks_uri"] == idp.jwks_url


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
    names, (listed, other_target) = await _list_and_call(
        gw,
        {"Authorization": f"Bearer {token}"},
        [("target_list", {}), ("target_capabilities", {"target": "t2"})],
    )
    assert names == INSPECT_TOOLS
    assert [t["name"] for t in listed.structured_content["targets"]] == ["t1"]
    # Inside its scopes, another target is a policy_denied result (refused before ssh: else connect_error).
    assert _code(other_target) == "policy_denied"


def _session(gw: GatewayProcess, http: httpx.Client) -> dict[str, str]:
    """Initialize a legacy streamable-HTTP session; the headers every later request of it carries."""
    r = http.post(gw.url, json=INIT, headers=ACCEPT)
    assert r.status_code == 200
    headers = session_headers(r)
    assert http.post(gw.url, json=INITIALIZED, headers={**ACCEPT, **headers}).status_code == 202
    return headers


def _call(http: httpx.Client, gw: GatewayProcess, headers: dict[str, str], tool: str, **args: Any) -> Any:
    return http.post(gw.url, json=tools_call(tool, args, 7), headers={**ACCEPT, **headers})


def _challenge(response: httpx.Response) -> dict[str, str]:
    assert response.headers["www-authenticate"].startswith("Bearer ")
    return challenge(response)


_data = sse_data


def test_a_call_outside_the_tokens_scopes_gets_403_insufficient_scope_naming_the_scopes_to_ask_for(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    token = idp.issue("alice", "remoteops:inspect")
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        session = _session(gw, http)
        refused = _call(http, gw, session, "remote_exec", target="t1", argv=["id"])
        assert refused.status_code == 403
        challenge = _challenge(refused)
        assert challenge["error"] == "insufficient_scope"
        assert challenge["scope"].split() == ["remoteops:inspect", "remoteops:execute"]  # kept + needed
        assert challenge["resource_metadata"] == METADATA_URL  # where the 401 points, too
        body = refused.json()
        assert (body["id"], body["error"]["code"]) == (7, -32600)
        assert body["error"]["data"]["error"] == "insufficient_scope"
        unknown = _call(http, gw, session, "no_such_tool")  # no scope opens a tool that does not exist
        assert unknown.status_code == 200
        assert _data(unknown)["error"]["code"] == -32602
        # The session is still usable, and a tool inside the scopes still runs.
        allowed = _call(http, gw, session, "target_list")
        assert allowed.status_code == 200
        assert [t["name"] for t in _data(allowed)["result"]["structuredContent"]["targets"]] == ["t1"]

    def refusal(record: dict[str, Any]) -> bool:  # resource reads have no tool
        return record.get("tool") == "remote_exec" and bool(record.get("facts", {}).get("http_status"))

    records = [r for r in _audit(gw, refusal) if refusal(r)]
    assert records[-1]["principal"] == "oauth:alice"
    assert records[-1]["error_code"] == "policy_denied"
    assert records[-1]["facts"]["insufficient_scope"] == ["remoteops:inspect", "remoteops:execute"]

    def found(text: str) -> bool:
        logged = [json.loads(line) for line in text.splitlines() if '"insufficient_scope"' in line]
        return any(r.get("principal") == "oauth:alice" and r.get("tool") == "remote_exec" for r in logged)

    assert found(gw.wait_stderr(found))


async def test_a_token_with_the_challenged_scopes_reaches_the_tool(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    token = idp.issue("alice", "remoteops:inspect")
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        refused = _call(http, gw, _session(gw, http), "remote_exec", target="t1", argv=["id"])
    wanted = _challenge(refused)["scope"]
    stepped_up = idp.issue("alice", wanted)
    _, (ran,) = await _list_and_call(
        gw, {"Authorization": f"Bearer {stepped_up}"}, [("remote_exec", {"target": "t1", "argv": ["id"]})]
    )
    assert _code(ran) == "connect_error"  # it really tried to reach t1 (nothing listens on port 1)


async def test_a_relayed_tool_without_the_upstream_scope_gets_403_and_with_it_is_relayed(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    token = idp.issue("alice", "remoteops:inspect")
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        refused = _call(http, gw, _session(gw, http), "echo", text="hi")
    assert refused.status_code == 403
    assert _challenge(refused)["scope"].split() == ["remoteops:inspect", "remoteops:upstream"]
    names, (echoed,) = await _list_and_call(
        gw,
        {"Authorization": f"Bearer {idp.issue('alice', 'remoteops:upstream')}"},
        [("echo", {"text": "hi"})],
    )
    assert "echo" in names
    assert not names & INSPECT_TOOLS  # the upstream scope opens relayed tools only
    assert echoed.structured_content == {"text": "hi"}


async def _surface(gw: GatewayProcess, token: str) -> tuple[list[str], list[str], list[Any]]:
    """Relayed resources and prompts as the caller of ``token`` sees them: the two lists, then a read and a
    prompt get (each the result, or the JSON-RPC error code)."""
    http = await _client_session(gw, {"Authorization": f"Bearer {token}"})
    outcomes: list[Any] = []
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        prompts = [p.name for p in (await client.list_prompts()).prompts]
        for attempt in (
            lambda: client.read_resource("fault://static"),
            lambda: client.get_prompt("greet", {"name": "Ada"}),
        ):
            try:
                outcomes.append(await attempt())
            except MCPError as error:
                outcomes.append(error.error.code)
    return resources, prompts, outcomes


async def test_relayed_resources_and_prompts_are_hidden_and_refused_without_the_upstream_scope(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    # The one policy, as for relayed tools: the gateway serves the surface, this caller's scopes do not
    # reach it — empty lists, and a read or get is refused like an unknown URI or name (-32602).
    resources, prompts, outcomes = await _surface(gw, idp.issue("alice", "remoteops:inspect"))
    assert (resources, prompts, outcomes) == ([], [], [-32602, -32602])
    resources, prompts, (read, greeted) = await _surface(gw, idp.issue("alice", "remoteops:upstream"))
    assert "fault://static" in resources
    assert "greet" in prompts
    assert read.contents
    assert greeted.messages


async def test_an_sdk_client_without_step_up_sees_the_403_as_the_calls_error(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    http = await _client_session(gw, {"Authorization": f"Bearer {idp.issue('alice', 'remoteops:inspect')}"})
    async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("remote_exec", {"target": "t1", "argv": ["id"]})
        assert refused.value.error.code == -32600
        assert isinstance(refused.value.error.data, dict)
        assert refused.value.error.data["error"] == "insufficient_scope"
        listed = await client.call_tool("target_list", {})  # the client and its session carry on
    assert [t["name"] for t in listed.structured_content["targets"]] == ["t1"]


def _audit(gw: GatewayProcess, wanted: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The audit records once one of them is ``wanted``: the writer is asynchronous, and this gateway is
    shared by the module, so records of earlier tests are there already; waited for, bounded (30 s)."""
    path = gw.state_dir / "audit.jsonl"
    deadline = time.monotonic() + 30
    while True:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        records = [json.loads(line) for line in text.split("\n")[:-1]]  # complete lines only
        if any(wanted(r) for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


async def test_the_audit_record_names_the_oauth_principal(gw: GatewayProcess, idp: AuthServer) -> None:
    token = idp.issue("alice", "remoteops:inspect")
    await _list_and_call(gw, {"Authorization": f"Bearer {token}"}, [("target_diagnose", {"target": "t2"})])

    def mine(record: dict[str, Any]) -> bool:  # resource reads have no tool
        return record.get("tool") == "target_diagnose" and record["principal"] == "oauth:alice"

    records = [r for r in _audit(gw, mine) if mine(r)]
    assert records
    assert records[-1]["identity"] == {
        "kind": "oauth",
        "subject": "alice",
        "client_id": "client-of-alice",
        "scopes": ["remoteops:inspect"],
    }
    assert records[-1]["error_code"] == "policy_denied"

    def denied(text: str) -> bool:
        denials = [json.loads(line) for line in text.splitlines() if '"policy_denied"' in line]
        return any(
            d.get("principal") == "oauth:alice" and d.get("tool") == "target_diagnose" for d in denials
        )

    assert denied(await gw.stderr_when(denied))
    assert token not in (gw.state_dir / "audit.jsonl").read_text(encoding="utf-8")


async def test_gateway_health_shows_a_restricted_caller_neither_other_targets_nor_upstreams(
    gw: GatewayProcess, idp: AuthServer
) -> None:
    async def health(token: str) -> dict[str, Any]:
        _, (out,) = await _list_and_call(gw, {"Authorization": f"Bearer {token}"}, [("gateway_health", {})])
        return dict(out.structured_content)

    web = idp.issue("wendy", "remoteops:inspect", groups=["web"])  # the group granted t2
    await _list_and_call(gw, {"Authorization": f"Bearer {web}"}, [("target_capabilities", {"target": "t2"})])
    assert "t2" in (await health(web))["transport"]["carriers"]  # t2 has transport state to hide
    inspect_only = await health(idp.issue("alice", "remoteops:inspect"))
    assert "t2" not in inspect_only["transport"]["carriers"]
    assert inspect_only["upstreams"] == []
    with_upstream = await health(idp.issue("alice", "remoteops:inspect remoteops:upstream"))
    assert [u["name"] for u in with_upstream["upstreams"]] == ["fault"]


async def test_the_log_line_of_every_call_names_the_principal(gw: GatewayProcess, idp: AuthServer) -> None:
    token = idp.issue("erin", "remoteops:inspect")
    await _list_and_call(gw, {"Authorization": f"Bearer {token}"}, [("gateway_health", {})])

    def erins(text: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in text.splitlines() if '"tool_call"' in line]
        return [r for r in lines if r.get("principal") == "oauth:erin" and r.get("tool") == "gateway_health"]

    mine = erins(await gw.stderr_when(lambda text: bool(erins(text))))
    assert mine
    assert (mine[-1]["outcome"], mine[-1]["error_code"], mine[-1]["level"]) == ("ok", None, "info")
    assert isinstance(mine[-1]["request_id"], str)
    assert token not in gw.stderr_text()


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
    assert any(r["principal"] == "proxy:dave" for r in _audit(gw, lambda r: r["principal"] == "proxy:dave"))


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
    text = gw.wait_stderr(lambda text: "identity_headers_ignored" in text)
    assert text.count("identity_headers_ignored") == 1  # logged once, not per request


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


def test_the_inspector_cli_with_an_inspect_only_token_does_not_find_an_execute_tool_and_fails_fast(
    inspector: InstalledTool,  # noqa: F811 - the session fixture imported above
    gw: GatewayProcess,
    idp: AuthServer,
    tmp_path: Path,
) -> None:
    # A real client looks the tool up in tools/list first: the policy hid it, so the call is never sent
    # (clients that send it anyway get the 403 step-up challenge, tested above).
    token = idp.issue("alice", "remoteops:inspect")
    argv = ["--cli", gw.url, "--transport", "http", "--method", "tools/call", "--tool-name", "remote_exec"]
    argv += ["--tool-arg", "target=t1", "--format", "json", "--stored-auth-only"]
    argv += ["--header", f"Authorization: Bearer {token}"]
    run = inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=tmp_path)  # raises TimeoutError if it hangs
    assert run.returncode != 0, run.describe()
    error = json.loads(run.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "tool_not_found", run.describe()
