"""``remote_root_exec`` end to end in process: MCP client → gateway → real sshd, real sudo and su, and a real
headless Chromium typing the password on the one-time page (served by the loopback listener the gateway opens
when it has no HTTP listener of its own, as in stdio mode).

The two ways the link reaches the human: URL-mode elicitation (the Python SDK client declares it when given an
elicitation callback; the callback hands the URL to Chromium) and the link inside the ``privilege_error``
(a client without elicitation; the call is retried after the password was entered).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from gateway._dispatch import error_payload
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.fixtures.browser import PageVisit, chromium, enter_password, visit
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory, read_audit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROLES = ("plain", "sudo", "pass")


def _settings(sshd: SshdInstance, **root: Any) -> dict[str, Any]:
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": role, "host": sshd.alias(role)} for role in ROLES],
        "root": {"targets": list(ROLES), "su_user": sshd.su_user, **root},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
    }


def _password(sshd: SshdInstance, provider: str) -> str:
    return sshd.pass_password if provider == "sudo_password" else sshd.su_password


# (target, providers): ro-pass escalates with sudo and its own password; ro-plain with su and ro-toor's
FLOWS = [("pass", ["sudo_password"]), ("plain", ["su_password"])]


async def _call(client: Client, target: str, argv: list[str]) -> types.CallToolResult:
    with anyio.fail_after(90):
        return await client.call_tool("remote_root_exec", {"target": target, "argv": argv})


async def test_a_nopasswd_sudo_target_runs_as_uid_0_through_sudo_nopasswd_and_audits_the_attempts(
    sshd: SshdInstance, gateway_client: ClientFactory
) -> None:
    async with gateway_client(**_settings(sshd)) as (client, rt):
        result = await _call(client, "sudo", ["id", "-u"])
        audit = await read_audit(rt)
    assert not result.is_error, result
    out = result.structured_content
    assert out is not None
    assert out["stdout"].strip() == "0"
    assert out["privilege"]["provider"] == "sudo_nopasswd"
    assert [(a["provider"], a["outcome"]) for a in out["privilege"]["attempts"]] == [
        ("direct_root", "skipped"),
        ("sudo_nopasswd", "ran"),
    ]
    record = next(json.loads(line) for line in audit.splitlines() if '"remote_root_exec"' in line)
    assert record["facts"]["privilege"]["provider"] == "sudo_nopasswd"
    assert record["facts"]["privilege"]["attempts"][0]["reason"].startswith("the login user is uid")


async def test_a_target_outside_the_root_allow_list_is_policy_denied_before_any_ssh_starts(
    sshd: SshdInstance, gateway_client: ClientFactory
) -> None:
    async with gateway_client(**_settings(sshd, targets=["sudo"])) as (client, rt):
        before = rt.remote.stats()
        result = await _call(client, "plain", ["id", "-u"])
        unconfigured = await _call(client, "elsewhere", ["id", "-u"])
        after = rt.remote.stats()
        infos = await rt.remote.list_targets()
    for failed in (result, unconfigured):
        error = error_payload(failed)
        assert error is not None
        assert error["code"] == "policy_denied"
    assert before.runs == after.runs == 0
    assert after.masters_created == 0
    assert after.capability_probes == 0
    assert all(not info.multiplex.master_alive for info in infos)


async def test_remote_exec_never_escalates(sshd: SshdInstance, gateway_client: ClientFactory) -> None:
    async with gateway_client(**_settings(sshd)) as (client, _):
        with anyio.fail_after(60):
            result = await client.call_tool("remote_exec", {"target": "sudo", "argv": ["id", "-u"]})
    assert result.structured_content is not None
    assert result.structured_content["stdout"].strip() != "0"
    assert result.structured_content["privilege"] is None


@pytest.mark.parametrize(("target", "providers"), FLOWS, ids=["sudo", "su"])
async def test_url_elicitation_sends_the_human_to_the_page_and_the_command_runs_as_root(
    sshd: SshdInstance, tmp_path: Path, target: str, providers: list[str]
) -> None:
    password = _password(sshd, providers[0])
    cfg = Settings.model_validate(
        {"state_dir": str(tmp_path / "state"), **_settings(sshd, providers=providers)}
    )
    asked: list[types.ElicitRequestURLParams] = []
    visits: list[PageVisit] = []
    async with chromium() as browser, anyio.create_task_group() as humans:

        async def on_elicit(
            _: Any, params: types.ElicitRequestParams
        ) -> types.ElicitResult | types.ErrorData:
            assert isinstance(params, types.ElicitRequestURLParams)  # never form mode for a password
            asked.append(params)

            async def human() -> None:
                visits.append(await enter_password(browser, params.url, password))

            humans.start_soon(human)  # the client shows the link; the human opens it afterwards
            return types.ElicitResult(action="accept")

        async with Runtime(cfg, all_specs()) as rt:
            server = build_server(rt, stdio_principal="test")
            async with Client(server, mode="legacy", elicitation_callback=on_elicit) as client:
                result = await _call(client, target, ["id", "-u"])
                again = await visit(browser, asked[0].url)
            audit = await read_audit(rt)
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["stdout"].strip() == "0"
    assert result.structured_content["privilege"]["provider"] == providers[0]
    assert len(asked) == 1
    assert asked[0].url.startswith("http://127.0.0.1:")
    page = visits[0]
    assert page.status == 200
    assert target in page.html
    assert (sshd.users["pass"] if target == "pass" else sshd.su_user) in page.html
    assert page.after_status == 200
    assert password not in page.after_html
    assert again.status == 410  # the link was used: refused from now on
    assert password not in audit
    assert password not in json.dumps(result.model_dump(mode="json"))


@pytest.mark.parametrize(("target", "providers"), FLOWS, ids=["sudo", "su"])
async def test_the_link_in_the_privilege_error_lets_the_human_enter_it_and_the_retry_uses_it_once(
    sshd: SshdInstance, gateway_client: ClientFactory, target: str, providers: list[str]
) -> None:
    password = _password(sshd, providers[0])
    async with chromium() as browser, gateway_client(**_settings(sshd, providers=providers)) as (client, rt):
        first = await _call(client, target, ["id", "-u"])
        error = error_payload(first)
        assert error is not None
        assert error["code"] == "privilege_error"
        assert error["details"]["reason"] == "secret_required"
        assert error["retryable"] is True  # "then retry this call": after the page
        assert error["details"]["retry_after"]
        assert error["details"]["root_agent"] is False  # the default; the message says what it costs
        assert "root.agent" in error["message"]
        link = error["details"]["entry"]
        assert link in error["message"]  # what the agent shows the human
        page = await enter_password(browser, link, password)
        second = await _call(client, target, ["id", "-u"])
        third = await _call(client, target, ["id", "-u"])  # the password was for one use only
        reused = await visit(browser, link)
        audit = await read_audit(rt)
    assert page.status == 200
    assert page.after_status == 200
    assert password not in page.after_html
    assert not second.is_error, second
    assert second.structured_content is not None
    assert second.structured_content["stdout"].strip() == "0"
    third_error = error_payload(third)
    assert third_error is not None
    assert third_error["details"]["reason"] == "secret_required"
    assert third_error["details"]["entry"] != link
    assert reused.status == 410
    assert password not in audit
    assert all(url.startswith(link.split("/secret/")[0]) for url in page.requests)  # nothing third-party


async def test_a_wrong_password_typed_on_the_page_is_a_privilege_error(
    sshd: SshdInstance, gateway_client: ClientFactory
) -> None:
    planted = "Wr0ng-typed-" + "q9" * 6
    async with (
        chromium() as browser,
        gateway_client(**_settings(sshd, providers=["sudo_password"])) as (
            client,
            _,
        ),
    ):
        first = await _call(client, "pass", ["id", "-u"])
        error = error_payload(first)
        assert error is not None
        await enter_password(browser, error["details"]["entry"], planted)
        second = await _call(client, "pass", ["id", "-u"])
    wrong = error_payload(second)
    assert wrong is not None
    assert wrong["code"] == "privilege_error"
    assert wrong["details"]["reason"] == "wrong_password"
    assert planted not in json.dumps(second.model_dump(mode="json"))


async def test_an_expired_link_is_refused(sshd: SshdInstance, gateway_client: ClientFactory) -> None:
    now = [time.monotonic()]  # the links' clock, moved past the lifetime instead of sleeping through it
    cfg = _settings(sshd, providers=["sudo_password"], secret_ttl_s=60)
    async with chromium() as browser, gateway_client(clock=lambda: now[0], **cfg) as (client, rt):
        first = await _call(client, "pass", ["id", "-u"])
        error = error_payload(first)
        assert error is not None
        link = error["details"]["entry"]
        entry = rt.secrets.entry(link.rsplit("/", 1)[1])
        assert entry is not None
        now[0] = entry.expires + 0.05
        late = await enter_password(browser, link, sshd.pass_password)
    assert late.status == 410
    assert late.after_status is None  # no form to submit


async def test_a_2026_07_28_client_gets_the_page_as_input_required_and_its_retry_runs_as_root(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    """No server-to-client requests on 2026-07-28: the link travels in an ``InputRequiredResult``; the SDK
    client answers it through its elicitation callback and retries; the retry waits for the page."""
    settings = _settings(sshd, providers=["sudo_password"])
    cfg = Settings.model_validate({"state_dir": str(tmp_path / "state"), **settings})
    asked: list[types.ElicitRequestURLParams] = []
    async with chromium() as browser, anyio.create_task_group() as humans:

        async def on_elicit(_: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            assert isinstance(params, types.ElicitRequestURLParams)
            asked.append(params)

            async def human() -> None:
                await enter_password(browser, params.url, sshd.pass_password)

            humans.start_soon(human)
            return types.ElicitResult(action="accept")

        async with Runtime(cfg, all_specs()) as rt:
            server = build_server(rt, stdio_principal="test")
            async with Client(server, mode="auto", elicitation_callback=on_elicit) as client:
                result = await _call(client, "pass", ["id", "-u"])
                era = client.protocol_version
            audit = await read_audit(rt)
    assert era == "2026-07-28"
    assert len(asked) == 1
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["stdout"].strip() == "0"
    outcomes = [json.loads(line)["outcome"] for line in audit.splitlines() if '"remote_root_exec"' in line]
    assert outcomes == ["input_required", "ok"]
