"""OAuth resource server: the gateway subprocess in ``auth.mode = "oauth"`` against a real authorization
server on loopback (the tests' one: real ES256 JWTs, a JWKS, RFC 8414 metadata).

A token with the inspect and execute scopes lists and runs tools on its granted target; an inspect-only
token sees no execute tool and its call to one gets HTTP 403 ``insufficient_scope`` naming the scope to
step up to; expired, wrong-audience, wrong-issuer and ``alg: none`` tokens get 401; the 401 points to
RFC 9728 metadata that names the real authorization server; the audit record and the log name the
principal of every call, and no token appears in either."""

from __future__ import annotations

import json
import shutil
import socket
import time
from typing import Any

import httpx

from acceptance._env import enter_sync
from acceptance._mcp import GatewayClient, error_code, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.oauth_server import AuthServer, run_auth_server
from acceptance.harness.raw_mcp import (
    ACCEPT,
    INIT,
    INITIALIZED,
    bearer,
    challenge,
    session_headers,
    tools_call,
)
from acceptance.phases._util import wait_until
from gateway.tools import all_specs

__all__ = ["oauth"]

RESOURCE = "https://remoteops-gateway.acceptance.test/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
EXECUTE = {s.name for s in all_specs() if s.toolset.value == "execute"}


def _refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


_challenge = challenge


async def _raw_call(http: httpx.AsyncClient, url: str, token: str, tool: str, args: Any) -> httpx.Response:
    """A real legacy session (initialize, initialized) and one ``tools/call`` on it, as raw HTTP."""
    auth = {**ACCEPT, **bearer(token)}
    init = await http.post(url, json=INIT, headers=auth)
    session = session_headers(init)
    await http.post(url, json=INITIALIZED, headers={**auth, **session})
    return await http.post(url, json=tools_call(tool, args), headers={**auth, **session})


@phase(
    "oauth",
    "OAuth resource server: real tokens, scopes → toolsets, 403 step-up, 401s, principal",
    needs=("sshd",),
)
async def oauth(ctx: PhaseContext) -> None:
    env = ctx.env
    idp: AuthServer = await enter_sync(ctx.stack, run_auth_server(RESOURCE))
    as_port = int(idp.base.rsplit(":", 1)[1])
    ctx.created(f"authorization server on port {as_port} stopped", lambda: _refuses_connections(as_port))
    control = env.control_dir()
    ctx.stack.callback(shutil.rmtree, control, True)
    ctx.created(f"{control} removed", lambda: not control.exists())
    config: dict[str, Any] = {
        **env.targets_config(control),
        "tools": {"toolsets": ["inspect", "execute"]},
        "auth": {
            "mode": "oauth",
            "grants": [{"subject": "alice", "targets": ["plain"]}],
            "oauth": {"issuer": idp.issuer, "resource": RESOURCE, "jwks_url": idp.jwks_url},
        },
    }
    gw = await ctx.stack.enter_async_context(env.extra_gateway("oauth", config))
    ctx.created(f"oauth gateway {gw.proc.pid} stopped", lambda: gw.proc.poll() is not None)
    full = idp.issue("alice", "remoteops:inspect remoteops:execute")
    inspect_only = idp.issue("alice", "remoteops:inspect")
    now = int(time.time())
    refused_tokens = {
        "expired": idp.issue("alice", "remoteops:inspect", exp=now - 120),
        "wrong_audience": idp.issue("alice", "remoteops:inspect", aud="https://elsewhere.test/mcp"),
        "wrong_issuer": idp.issue("alice", "remoteops:inspect", iss="http://127.0.0.1:1/evil"),
        "alg_none": idp.unsigned("alice", "remoteops:inspect"),
    }
    statuses: dict[str, int] = {}
    async with httpx.AsyncClient(timeout=15) as http:
        # 401 without a token, pointing to the metadata, which names the real authorization server.
        anonymous = await http.post(gw.url, json=INIT, headers=ACCEPT)
        statuses["no_token"] = anonymous.status_code
        ctx.check(anonymous.status_code == 401, f"no token: HTTP {anonymous.status_code}")
        pointed = _challenge(anonymous).get("resource_metadata", "")
        ctx.check(
            pointed.endswith(METADATA_PATH), f"401 challenge: {anonymous.headers.get('www-authenticate')}"
        )
        meta = (await http.get(gw.base + METADATA_PATH)).json()
        ctx.check(meta.get("authorization_servers") == [idp.issuer], f"metadata: {meta}")
        ctx.check("remoteops:execute" in meta.get("scopes_supported", []), f"metadata scopes: {meta}")
        found = (await http.get(idp.issuer + "/.well-known/oauth-authorization-server")).json()
        ctx.check(found.get("jwks_uri") == idp.jwks_url, f"authorization server metadata: {found}")
        for name, token in refused_tokens.items():
            response = await http.post(
                gw.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {token}"}
            )
            statuses[name] = response.status_code
            ctx.check(response.status_code == 401, f"{name}: HTTP {response.status_code}, want 401")
        # An inspect-only token calling an execute tool: 403 insufficient_scope naming the scope to ask for.
        stepped = await _raw_call(
            http, gw.url, inspect_only, "remote_exec", {"target": "plain", "argv": ["id"]}
        )
        statuses["inspect_only_remote_exec"] = stepped.status_code
        challenge = _challenge(stepped)
        ctx.check(stepped.status_code == 403, f"inspect-only remote_exec: HTTP {stepped.status_code}")
        ctx.check(challenge.get("error") == "insufficient_scope", f"403 challenge: {challenge}")
        ctx.check("remoteops:execute" in challenge.get("scope", "").split(), f"403 scope: {challenge}")
    async with GatewayClient(gw.url, {"Authorization": f"Bearer {full}"}, env.seen) as client:
        listed = set(await client.tool_names())
        ctx.check({"remote_exec", "target_list"} <= listed, f"full token lists {sorted(listed)}")
        ran = await client.call("remote_exec", {"target": "plain", "argv": ["id", "-un"]})
        ctx.check(error_code(ran) is None and structured(ran)["exit_code"] == 0, f"remote_exec: {ran}")
        other = await client.call("target_capabilities", {"target": "sudo"})
        ctx.check(error_code(other) == "policy_denied", f"a target outside the grant: {other}")
    async with GatewayClient(gw.url, {"Authorization": f"Bearer {inspect_only}"}, env.seen) as client:
        narrow = set(await client.tool_names())
        ctx.check(not narrow & EXECUTE, f"inspect-only token lists execute tools: {sorted(narrow & EXECUTE)}")
        targets = structured(await client.call("target_list", {}))["targets"]
        ctx.check([t["name"] for t in targets] == ["plain"], f"target_list: {targets}")
    audit_path = gw.state_dir / "audit.jsonl"

    def audit() -> list[dict[str, Any]]:
        lines = audit_path.read_text(encoding="utf-8").splitlines() if audit_path.exists() else []
        return [json.loads(line) for line in lines]

    async def written() -> bool:  # the audit writer is asynchronous: its records land shortly after
        return sum(r["tool"] == "remote_exec" for r in audit()) >= 2

    await wait_until(written, 10)
    records = audit()
    exec_ok = [r for r in records if r["tool"] == "remote_exec" and r["outcome"] == "ok"]
    exec_403 = [
        r for r in records if r["tool"] == "remote_exec" and (r.get("facts") or {}).get("http_status")
    ]
    ctx.check(bool(exec_ok) and exec_ok[-1]["principal"] == "oauth:alice", f"audit of the run: {exec_ok}")
    ctx.check(bool(exec_403) and exec_403[-1]["principal"] == "oauth:alice", f"audit of the 403: {exec_403}")

    def alice_logged(text: str) -> bool:
        logged = [json.loads(line) for line in text.splitlines() if '"tool_call"' in line]
        return any(r.get("principal") == "oauth:alice" for r in logged)

    try:
        ctx.check(alice_logged(await gw.stderr_when(alice_logged)), "no tool_call log line names alice")
    except TimeoutError:
        ctx.check(False, "no tool_call log line names alice")
    outputs = audit_path.read_text(encoding="utf-8") + gw.stderr_text()
    for token in (full, inspect_only, *refused_tokens.values()):
        ctx.check(token not in outputs, "an access token appears in the audit log or the gateway's log")
    ctx.figures.update(
        {
            "statuses": statuses,
            "tools_full_token": len(listed),
            "tools_inspect_only": len(narrow),
            "step_up_scope": challenge.get("scope"),
            "jwks_fetches": idp.jwks_requests,
            "audit_records": len(records),
        }
    )
