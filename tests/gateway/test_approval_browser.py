"""Human approval of ``remote_root_exec`` end to end: MCP client → gateway → a real headless Chromium on
the approval page → the real sshd, where the command is checked to have run once, or never.

The gateway runs in process with the console and approval pages on the loopback listener it opens on
first need (as in stdio mode); the operator logs in with the static operator token. The approval link
reaches the human by URL-mode elicitation (the Python client's elicitation callback hands it to
Chromium) or, for a client without it, inside the ``approval_required`` error.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client

from gateway._dispatch import error_payload
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.console.pages import console_routes, operator_auth
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.fixtures.browser import PageVisit, chromium, decide_approval, operator_login
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import read_audit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOKEN = "op-" + secrets.token_urlsafe(24)
Elicit = Callable[[Any, types.ElicitRequestParams], Any]


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def _config(sshd: SshdInstance, tmp_path: Path, **approvals: Any) -> Settings:
    return Settings.model_validate(
        {
            "state_dir": str(tmp_path / "state"),
            "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
            "targets": [{"name": "sudo", "host": sshd.alias("sudo")}],
            "root": {"targets": ["sudo"]},
            "tools": {"toolsets": ["inspect", "execute", "root"]},
            "approvals": {
                "rules": [{"name": "root on su*", "toolsets": ["root"], "targets": ["su*"]}],
                "progress_interval_s": 0.1,
                **approvals,
            },
        }
    )


@asynccontextmanager
async def approving_gateway(
    cfg: Settings,
    *,
    principal: str = "agent",
    elicit: Elicit | None = None,
    clock: Callable[[], float] | None = None,
) -> AsyncIterator[tuple[Client, Runtime]]:
    """The gateway with its console mounted as ``serve --stdio`` mounts it, and an MCP client on it."""
    async with Runtime(cfg, all_specs(), **({"clock": clock} if clock else {})) as rt:
        rt.secret_listener.add_routes(console_routes(rt, operator_auth(rt, TOKEN)))
        server = build_server(rt, stdio_principal=principal)
        async with Client(server, mode="legacy", elicitation_callback=elicit) as client:
            yield client, rt


async def _exec(client: Client, tool: str, argv: list[str]) -> types.CallToolResult:
    with anyio.fail_after(90):
        return await client.call_tool(tool, {"target": "sudo", "argv": argv})


class Marker:
    """A file on the target that the gated root command appends one line to: how often it ran."""

    def __init__(self) -> None:
        self.path = f"/tmp/rog-approval-{uuid.uuid4().hex[:12]}"

    @property
    def command(self) -> list[str]:
        return ["sh", "-c", f"echo ran >> {self.path}; id -u"]

    async def create(self, client: Client) -> None:
        made = await _exec(client, "remote_exec", ["sh", "-c", f": > {self.path}; chmod 666 {self.path}"])
        assert not made.is_error, made

    async def runs(self, client: Client) -> int:
        out = await _exec(client, "remote_exec", ["cat", self.path])
        assert out.structured_content is not None, out
        return int(out.structured_content["stdout"].count("ran"))

    async def remove(self, client: Client) -> None:
        await _exec(client, "remote_exec", ["rm", "-f", self.path])


async def _run_decided(
    client: Client, marker: Marker, human_done: anyio.Event
) -> tuple[types.CallToolResult, int]:
    """The gated root command, once the human has decided it; and how often it ran on the target."""
    await marker.create(client)
    result = await _exec(client, "remote_root_exec", marker.command)
    with anyio.fail_after(60):
        await human_done.wait()
    ran = await marker.runs(client)
    await marker.remove(client)
    return result, ran


def _humans(browser: object, tg: Any, visits: list[PageVisit], asked: list[str], **decide: Any) -> Elicit:
    seen: anyio.Event | None = decide.pop("seen", None)
    done: anyio.Event | None = decide.pop("done", None)

    async def on_elicit(_: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestURLParams)
        asked.append(params.url)
        if seen is not None:
            seen.set()
        if decide.get("decision") != "nobody":

            async def human() -> None:
                visits.append(await decide_approval(browser, params.url, TOKEN, **decide))
                if done is not None:
                    done.set()

            tg.start_soon(human)
        return types.ElicitResult(action="accept")

    return on_elicit


async def test_an_approved_root_command_runs_once_and_the_audit_names_caller_and_approver(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    marker, visits, asked = Marker(), list[PageVisit](), list[str]()
    async with chromium() as browser, anyio.create_task_group() as tg:
        human_done = anyio.Event()
        elicit = _humans(
            browser, tg, visits, asked, decision="approve", reason="change 42", name="dana", done=human_done
        )
        async with approving_gateway(_config(sshd, tmp_path), elicit=elicit) as (client, rt):
            result, ran = await _run_decided(client, marker, human_done)
            audit = await read_audit(rt)
            tg.cancel_scope.cancel()
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["stdout"].strip().endswith("0")
    assert ran == 1
    page = visits[0]
    assert page.status == 200
    assert marker.path in page.html  # the human saw the exact command
    assert ">agent<" in page.html  # and who asked
    assert page.after_status == 200
    assert 'id="done"' in page.after_html
    assert all(url.startswith(asked[0].split("/approvals/")[0]) for url in page.requests)  # nothing else
    records = [json.loads(line) for line in audit.splitlines()]
    decision = next(r for r in records if r.get("event") == "approval_decision")
    assert decision["decision"] == "approved"
    assert decision["caller"]["label"] == "agent"
    assert decision["approver"]["label"] == "operator:dana"
    assert decision["reason"] == "change 42"
    call = next(r for r in records if r.get("tool") == "remote_root_exec" and r.get("outcome") == "ok")
    assert call["principal"] == "agent"
    assert call["facts"]["approval"]["approver"]["label"] == "operator:dana"
    assert call["facts"]["approval"]["state"] == "used"


async def test_a_denied_root_command_is_policy_denied_with_the_reason_and_never_runs(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    marker = Marker()
    visits: list[PageVisit] = []
    asked: list[str] = []
    async with chromium() as browser, anyio.create_task_group() as tg:
        human_done = anyio.Event()
        elicit = _humans(
            browser, tg, visits, asked, decision="deny", reason="not on a Friday", done=human_done
        )
        async with approving_gateway(_config(sshd, tmp_path), elicit=elicit) as (client, _):
            result, ran = await _run_decided(client, marker, human_done)
    error = error_payload(result)
    assert error is not None
    assert error["code"] == "policy_denied"
    assert error["details"]["reason"] == "approval_denied"
    assert error["details"]["reason_text"] == "not on a Friday"
    assert error["details"]["approver"] == "operator:human"
    assert visits[0].after_status == 200
    assert ran == 0


async def _own_call_post(page: Any, url: str) -> int:
    """Submit an approval from the operator's own session by hand (the page offers no form to its caller):
    the session's CSRF token is the log-out form's, the digest the page shows."""
    status: int = await page.evaluate(
        """async (url) => {
            const csrf = document.querySelector('form[action="/console/logout"] input[name=csrf]').value;
            const digest = document.getElementById('digest').textContent;
            const body = new URLSearchParams({csrf, digest, decision: 'approve', reason: ''});
            const r = await fetch(url, {method: 'POST', body, credentials: 'same-origin'});
            return r.status;
        }""",
        url,
    )
    return status


async def test_the_link_alone_the_caller_itself_and_an_altered_request_cannot_approve_and_it_times_out(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    from playwright.async_api import Browser

    marker = Marker()
    clock = Clock()
    asked: list[str] = []
    async with chromium() as browser, anyio.create_task_group() as tg:
        assert isinstance(browser, Browser)
        seen = anyio.Event()
        elicit = _humans(browser, tg, [], asked, decision="nobody", seen=seen)
        cfg = _config(sshd, tmp_path)
        async with approving_gateway(cfg, principal="alice", elicit=elicit, clock=clock) as (client, rt):
            await marker.create(client)
            results: list[types.CallToolResult] = []
            answered = anyio.Event()

            async def call() -> None:
                results.append(await _exec(client, "remote_root_exec", marker.command))
                answered.set()

            tg.start_soon(call)
            with anyio.fail_after(30):
                await seen.wait()
            url = asked[0]
            # 1. a model's fetch tool: GET the link (following redirects), then POST an approval to it
            async with httpx.AsyncClient(follow_redirects=True, timeout=30) as fetch:
                got = await fetch.get(url)
                posted = await fetch.post(url, data={"decision": "approve", "digest": "x", "csrf": "x"})
            # 2. a browser without operator login
            anonymous = await decide_approval(browser, url, "not-the-token-" + "x" * 20)
            # 3. the caller itself, logged in as an operator under its own name
            context = await browser.new_context()
            own_page = await context.new_page()
            own_status = await operator_login(own_page, url, TOKEN, name="alice")
            own_html = await own_page.content()
            own_post = await _own_call_post(own_page, url)
            await context.close()
            # 4. another operator, whose page showed another request than the one waiting (digest changed)
            context = await browser.new_context()
            bob = await context.new_page()
            await operator_login(bob, url, TOKEN, name="bob")
            await bob.evaluate("document.querySelector('input[name=digest]').value = '0'.repeat(64)")
            async with bob.expect_navigation() as navigation:
                await bob.click("#approve")
            altered = await navigation.value
            await context.close()
            (approval,) = rt.approvals.pending()
            still_pending = approval.state
            clock.now = approval.expires  # 5. nobody decided in approvals.timeout_s
            with anyio.fail_after(30):
                await answered.wait()
            ran = await marker.runs(client)
            await marker.remove(client)
            tg.cancel_scope.cancel()
    for answer in (got, posted):
        assert answer.status_code == 401
        assert marker.path not in answer.text  # nothing about the call is shown without an operator
        assert 'id="approve"' not in answer.text
    assert answer.headers["cache-control"].startswith("no-store")
    assert anonymous.status == 401
    assert 'id="login-error"' in anonymous.html
    assert own_status == 200
    assert 'id="own"' in own_html
    assert 'id="approve"' not in own_html
    assert own_post == 403
    assert altered is not None
    assert altered.status == 409
    assert still_pending == "pending"
    error = error_payload(results[0])
    assert error is not None
    assert error["code"] == "policy_denied"
    assert error["details"]["reason"] == "approval_timeout"
    assert ran == 0


async def test_without_elicitation_the_link_is_in_the_error_and_only_the_approved_request_runs(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    marker = Marker()
    async with chromium() as browser, approving_gateway(_config(sshd, tmp_path)) as (client, _):
        await marker.create(client)
        first = error_payload(await _exec(client, "remote_root_exec", marker.command))
        assert first is not None
        assert first["details"]["reason"] == "approval_required"
        link = first["details"]["approval_url"]
        page = await decide_approval(browser, link, TOKEN, decision="approve")
        altered = error_payload(await _exec(client, "remote_root_exec", [*marker.command[:2], "id -u"]))
        ran_before = await marker.runs(client)
        approved = await _exec(client, "remote_root_exec", marker.command)
        ran_after = await marker.runs(client)
        await marker.remove(client)
    assert page.after_status == 200
    assert altered is not None
    assert altered["details"]["reason"] == "approval_required"  # a changed request needs its own approval
    assert altered["details"]["approval_id"] != first["details"]["approval_id"]
    assert ran_before == 0
    assert not approved.is_error, approved
    assert ran_after == 1


async def test_the_human_sees_the_diff_of_a_write_and_the_hunks_of_a_patch_under_a_gated_path(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    folder = f"/tmp/rog-approval-etc-{uuid.uuid4().hex[:8]}"
    rules = [
        {"name": "writes under the folder", "tools": ["remote_write", "remote_patch"], "paths": [folder]}
    ]
    cfg = _config(sshd, tmp_path, rules=rules)
    path = f"{folder}/app.conf"
    async with chromium() as browser, approving_gateway(cfg) as (client, _):

        async def call(tool: str, **arguments: Any) -> types.CallToolResult:
            with anyio.fail_after(90):
                return await client.call_tool(tool, {"target": "sudo", **arguments})

        async def page_of(result: types.CallToolResult, decision: str) -> PageVisit:
            error = error_payload(result)
            assert error is not None, result
            return await decide_approval(browser, error["details"]["approval_url"], TOKEN, decision=decision)

        first, second = "port = 8080\nworkers = 4\n", "port = 9090\nworkers = 4\n"
        await _exec(client, "remote_exec", ["mkdir", "-p", folder])
        outside = await call("remote_write", path=f"{folder}-x", content="x\n")  # not under the prefix
        created = await page_of(await call("remote_write", path=path, content=first), "approve")
        await call("remote_write", path=path, content=first)
        change_page = await page_of(await call("remote_write", path=path, content=second), "none")
        hunk = {"old": "workers = 4", "new": "workers = 16"}
        patch_page = await page_of(await call("remote_patch", path=path, hunks=[hunk]), "none")
        await _exec(client, "remote_exec", ["rm", "-rf", folder, f"{folder}-x"])
    assert not outside.is_error, outside
    assert "(a new file)" in created.html
    assert "+port = 8080" in created.html
    assert "-port = 8080" in change_page.html
    assert "+port = 9090" in change_page.html
    assert "workers = 4" in change_page.html  # context line
    assert "-workers = 4" in patch_page.html
    assert "+workers = 16" in patch_page.html


async def test_a_2026_07_28_client_gets_the_link_as_input_required_and_only_the_shown_request_runs(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    """No server-to-client requests on 2026-07-28: the approval link travels in an ``InputRequiredResult``;
    the SDK client shows it (its elicitation callback hands it to Chromium) and retries, and the retry waits
    for the decision. A retry carrying other arguments than the request shown is refused."""
    from gateway.approvals.gate import APPROVAL_KEY

    marker, visits, asked = Marker(), list[PageVisit](), list[str]()
    async with chromium() as browser, anyio.create_task_group() as tg:
        human_done = anyio.Event()
        elicit = _humans(browser, tg, visits, asked, decision="approve", done=human_done)
        cfg = _config(sshd, tmp_path)
        async with Runtime(cfg, all_specs()) as rt:
            rt.secret_listener.add_routes(console_routes(rt, operator_auth(rt, TOKEN)))
            async with Client(
                build_server(rt, stdio_principal="agent"), mode="auto", elicitation_callback=elicit
            ) as client:
                era = client.protocol_version
                result, ran = await _run_decided(client, marker, human_done)
                await marker.create(client)
                with anyio.fail_after(60):
                    first = await client.session.call_tool(
                        "remote_root_exec",
                        {"target": "sudo", "argv": marker.command},
                        allow_input_required=True,
                    )
                    assert isinstance(first, types.InputRequiredResult), first
                    altered = await client.session.call_tool(
                        "remote_root_exec",
                        {"target": "sudo", "argv": [*marker.command[:2], "id -u"]},
                        input_responses={APPROVAL_KEY: types.ElicitResult(action="accept")},
                        request_state=first.request_state,
                        allow_input_required=True,
                    )
                ran_altered = await marker.runs(client)
                await marker.remove(client)
            audit = await read_audit(rt)
        tg.cancel_scope.cancel()
    assert era == "2026-07-28"
    assert not result.is_error, result
    assert ran == 1
    assert len(asked) == 1
    assert isinstance(altered, types.CallToolResult)
    error = error_payload(altered)
    assert error is not None
    assert error["details"]["reason"] == "approval_altered"
    assert ran_altered == 0
    records = [json.loads(line) for line in audit.splitlines()]
    outcomes = [
        r["outcome"] for r in records if r.get("event") == "tool_call" and r["tool"] == "remote_root_exec"
    ]
    assert outcomes == ["input_required", "ok", "input_required", "error"]


async def test_an_approved_call_that_first_needs_a_password_keeps_its_approval_for_the_retry(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    """Approval first, then the one-time password page: nothing ran between them, so the retry after the
    password is still approved (one human decision, one password, one run)."""
    from tests.fixtures.browser import enter_password

    cfg = Settings.model_validate(
        {
            **_config(sshd, tmp_path).model_dump(mode="json", exclude={"targets", "root", "approvals"}),
            "targets": [{"name": "pass", "host": sshd.alias("pass")}],
            "root": {"targets": ["pass"], "providers": ["sudo_password"]},
            "approvals": {"rules": [{"name": "root on pa*", "toolsets": ["root"], "targets": ["pa*"]}]},
        }
    )
    argv = ["id", "-u"]
    async with chromium() as browser, approving_gateway(cfg) as (client, rt):

        async def root() -> dict[str, Any] | None:
            with anyio.fail_after(90):
                return error_payload(
                    await client.call_tool("remote_root_exec", {"target": "pass", "argv": argv})
                )

        asked = await root()
        assert asked is not None
        decided = await decide_approval(browser, asked["details"]["approval_url"], TOKEN)
        password = await root()
        assert password is not None
        entered = await enter_password(browser, password["details"]["entry"], sshd.pass_password)
        with anyio.fail_after(90):
            ran = await client.call_tool("remote_root_exec", {"target": "pass", "argv": argv})
        counters = dict(rt.approvals.counters)
    assert asked["details"]["reason"] == "approval_required"
    assert decided.after_status == 200
    assert (password["code"], password["details"]["reason"]) == ("privilege_error", "secret_required")
    assert entered.after_status == 200
    assert not ran.is_error, ran
    assert ran.structured_content is not None
    assert ran.structured_content["stdout"].strip() == "0"
    assert (counters["requested"], counters["approved"]) == (1, 1)
