"""Who may use the console and decide approvals, over the gateway's real HTTP app (``build_http_app`` with the
trusted-proxy middleware and the console routes, as ``serve --http`` builds it), requests in process.

The trusted proxy's ``operator`` group makes an operator; a proxied user who made the call cannot approve
it; the token login sets an ``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` on https); forms need the
session's CSRF token and the same origin; the operator token is never the bearer token; sessions end after
``console.session_ttl_s`` (an injected clock).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from gateway._errors import ConfigError
from gateway._runtime import Runtime
from gateway.approvals.hub import Approval
from gateway.approvals.rules import ShownRequest
from gateway.auth.policy import Principal
from gateway.config import Settings
from gateway.console.auth import SESSION_COOKIE, OperatorAuth
from gateway.console.pages import console_routes, operator_auth
from gateway.serving.http import build_http_app
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.gateway.conftest import read_audit

pytestmark = pytest.mark.anyio

BEARER = "bearer-" + "b" * 30
OPERATOR = "operator-" + "o" * 30
PROXY_SECRET = "proxy-" + "p" * 30


def _secret(path: Path, value: str) -> Path:
    path.write_text(value + "\n", encoding="utf-8")
    os.chmod(path, 0o600)
    return path


@asynccontextmanager
async def console_app(
    tmp_path: Path, base: str = "http://127.0.0.1:9"
) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    cfg = Settings.model_validate(
        {
            "state_dir": str(tmp_path / "state"),
            "auth": {
                "trusted_proxy": {
                    "peers": ["127.0.0.1"],
                    "secret_file": str(_secret(tmp_path / "proxy-secret", PROXY_SECRET)),
                }
            },
        }
    )
    async with Runtime(cfg, all_specs()) as rt:
        routes = console_routes(rt, operator_auth(rt, OPERATOR, bearer_token=BEARER))
        app = build_http_app(build_server(rt), cfg, token=BEARER, port=9, runtime=rt, extra_routes=routes)
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url=base) as client:
            yield client, rt


def _proxied(user: str, groups: str = "operator") -> dict[str, str]:
    return {"X-Forwarded-User": user, "X-Forwarded-Groups": groups, "X-Remoteops-Proxy-Secret": PROXY_SECRET}


def _pending(rt: Runtime, caller: Principal) -> Approval:
    shown = ShownRequest.of(
        tool="remote_root_exec",
        toolset="root",
        target="prod-db",
        principal=caller.label,
        arguments={"target": "prod-db", "argv": ["reboot"]},
        rule="root on prod-*",
    )
    return rt.approvals.request(shown, caller)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


async def _decide(
    client: httpx.AsyncClient, approval: Approval, headers: dict[str, str], **form: str
) -> httpx.Response:
    page = await client.get(f"/approvals/{approval.id}", headers=headers)
    data = {"csrf": _csrf(page.text), "digest": approval.shown.digest, "decision": "approve", **form}
    return await client.post(
        f"/approvals/{approval.id}", data=data, headers={**headers, "Origin": str(client.base_url)}
    )


async def test_the_proxys_operator_group_decides_but_never_the_caller_and_never_a_forged_header(
    tmp_path: Path,
) -> None:
    alice = Principal(kind="proxy", subject="alice", client_id="trusted-proxy")
    async with console_app(tmp_path) as (client, rt):
        approval = _pending(rt, alice)
        no_group = await client.get("/console", headers=_proxied("bob", groups="dev"))
        forged = await client.get(
            "/console", headers={**_proxied("bob"), "X-Remoteops-Proxy-Secret": "x" * 30}
        )
        own_page = await client.get(f"/approvals/{approval.id}", headers=_proxied("alice"))
        own = await _decide(client, approval, _proxied("alice"))
        bob_console = await client.get("/console", headers=_proxied("bob"))
        approved = await _decide(client, approval, _proxied("bob"), reason="planned")
        audit = await read_audit(rt)
    assert no_group.status_code == 401
    assert forged.status_code == 401
    assert "reboot" not in no_group.text + forged.text
    assert own_page.status_code == 200
    assert 'id="own"' in own_page.text
    assert own.status_code == 403
    assert bob_console.status_code == 200
    assert "remote_root_exec" in bob_console.text
    assert approved.status_code == 200
    assert approval.state == "approved"
    assert approval.approver is not None
    assert approval.approver.label == "proxy:bob"
    decision = next(json.loads(line) for line in audit.splitlines() if "approval_decision" in line)
    assert decision["caller"]["label"] == "proxy:alice"
    assert decision["approver"]["label"] == "proxy:bob"


async def test_the_token_login_sets_a_strict_cookie_and_forms_need_its_csrf_token_and_origin(
    tmp_path: Path,
) -> None:
    async with console_app(tmp_path, base="https://gateway.example.test") as (client, rt):
        approval = _pending(rt, Principal.operator("bearer", "operator"))
        form = await client.get("/console/login")
        wrong = await client.post(
            "/console/login", data={"csrf": _csrf(form.text), "token": BEARER, "name": "eve"}
        )  # the agent's bearer token is not an operator's
        login = await client.post(
            "/console/login?next=/console", data={"csrf": _csrf(form.text), "token": OPERATOR, "name": "dana"}
        )
        cookie = login.headers["set-cookie"].lower()
        page = await client.get(f"/approvals/{approval.id}")
        no_csrf = await client.post(
            f"/approvals/{approval.id}", data={"decision": "approve", "digest": approval.shown.digest}
        )
        csrf = _csrf(page.text)
        foreign = await client.post(
            f"/approvals/{approval.id}",
            data={"csrf": csrf, "decision": "approve", "digest": approval.shown.digest},
            headers={"Origin": "https://evil.example"},
        )
        denied = await client.post(
            f"/approvals/{approval.id}",
            data={"csrf": csrf, "decision": "deny", "digest": approval.shown.digest, "reason": "no"},
            headers={"Origin": "https://gateway.example.test"},
        )
    assert form.status_code == 200
    assert wrong.status_code == 401
    assert login.status_code == 303
    assert login.headers["location"] == "/console"
    assert SESSION_COOKIE in cookie
    for flag in ("httponly", "samesite=strict", "secure", "path=/"):
        assert flag in cookie
    assert page.status_code == 200
    assert no_csrf.status_code == 403
    assert foreign.status_code == 403
    assert denied.status_code == 200
    assert (approval.state, approval.reason) == ("denied", "no")
    assert approval.approver is not None
    assert approval.approver.label == "operator:dana"


async def test_the_operator_token_can_never_be_the_bearer_token(tmp_path: Path) -> None:
    cfg = Settings.model_validate({"state_dir": str(tmp_path / "state")})
    async with Runtime(cfg, all_specs()) as rt:
        with pytest.raises(ConfigError):
            operator_auth(rt, BEARER, bearer_token=BEARER)


def _request(cookie: str | None = None) -> Request:
    headers: list[tuple[bytes, bytes]] = [(b"host", b"127.0.0.1:9")]
    if cookie is not None:
        headers.append((b"cookie", f"{SESSION_COOKIE}={cookie}".encode()))
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/console",
        "headers": headers,
        "query_string": b"",
    }
    return Request(scope)


def test_an_operator_session_ends_after_its_lifetime() -> None:
    now = [100.0]
    auth = OperatorAuth(OPERATOR, group="operator", ttl_s=60, clock=lambda: now[0])
    assert auth.login("wrong-" + "x" * 30, "dana") is None
    session = auth.login(OPERATOR, "dana\x07")
    assert session is not None
    assert session.approver.subject == "dana"  # control characters dropped from the audited name
    assert auth.session(_request(session.id))[0] is session
    now[0] += 60
    assert auth.session(_request(session.id))[0] is None
    assert auth.session(_request())[0] is None


def test_the_cookies_are_secure_behind_a_tls_proxy_when_configured() -> None:
    from starlette.responses import Response

    for secure, expected in ((None, False), (True, True)):
        auth = OperatorAuth(OPERATOR, group="operator", ttl_s=60, secure=secure)
        session = auth.login(OPERATOR, "dana")
        assert session is not None
        response = Response()
        auth.set_cookie(_request(), response, session)  # the gateway itself saw http
        assert ("secure" in response.headers["set-cookie"].lower()) is expected


async def test_the_live_stream_sends_each_call_and_approval_change_and_ends_when_serving_stops() -> None:
    import anyio

    from gateway.console.feed import Feed

    feed = Feed(size=2)
    send, receive = anyio.create_memory_object_stream[str](16)

    async def browser() -> None:
        async with send:
            async for chunk in feed.events(keepalive_s=30):
                await send.send(chunk)

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(browser)
        with anyio.fail_after(10):
            opened = await receive.receive()  # the stream is open
            feed.on_call({"tool": "remote_exec", "request_id": "r1"})
            call = await receive.receive()
            feed.stop()
            rest = [chunk async for chunk in receive]  # ends: the generator returned
    assert opened.startswith("retry:")
    assert call.startswith("event: call\n")
    assert '"remote_exec"' in call
    assert rest == []
    assert [c["request_id"] for c in feed.recent()] == ["r1"]
