"""Approval rules, the hub's decisions and the gate in the dispatch path, in process (no target needed).

The gated tool is ``gateway_health`` (it reaches no target), so these pin the gate's own behaviour: the
link fallback and its retry, denial and timeout (an injected clock), the re-check of what was approved,
progress while waiting, and who may decide. The browser and a real command on a real sshd are in
test_approval_browser.py.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest

from gateway._dispatch import error_payload
from gateway.approvals.gate import await_approval
from gateway.approvals.hub import ApprovalHub, Approver
from gateway.approvals.rules import ShownRequest, call_paths, matching_rule
from gateway.auth.policy import Principal
from gateway.config import ApprovalRule, Settings
from tests.gateway.conftest import ClientFactory, read_audit

pytestmark = pytest.mark.anyio

ALICE = Principal(kind="oauth", subject="alice", client_id="cli")
GATED = {"approvals": {"rules": [{"name": "health", "tools": ["gateway_health"]}], "timeout_s": 60}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _match(rule: dict[str, Any], tool: str, toolset: str, target: str | None, **args: Any) -> bool:
    rules = (ApprovalRule.model_validate(rule),)
    targets = (target,) if target is not None else None
    found = matching_rule(rules, ALICE, tool=tool, toolset=toolset, targets=targets, arguments=args)
    return found is not None


def test_rules_match_by_toolset_target_glob_principal_and_path_prefix() -> None:
    prod_root = {"toolsets": ["root", "teardown"], "targets": ["prod-*"]}
    assert _match(prod_root, "remote_root_exec", "root", "prod-web1")
    assert not _match(prod_root, "remote_root_exec", "root", "staging-1")
    assert not _match(prod_root, "remote_exec", "execute", "prod-web1")
    etc = {"tools": ["remote_write"], "paths": ["/etc"]}
    assert _match(etc, "remote_write", "manage", "t", path="/etc/hosts")
    assert _match(etc, "remote_write", "manage", "t", path="/etc/../etc/ssh/sshd_config")
    assert not _match(etc, "remote_write", "manage", "t", path="/etcetera/x")
    assert not _match(etc, "remote_write", "manage", "t", path="/tmp/etc")
    assert _match(etc, "remote_write", "manage", "t", path_b64="L2V0Yy9wYXNzd2Q=")  # /etc/passwd
    assert _match({"principals": ["oauth:ali*"]}, "x", "inspect", None)
    assert not _match({"principals": ["bob"]}, "x", "inspect", None)
    assert _match(prod_root, "task_cancel", "teardown", None)  # no target named: fail closed
    assert list(call_paths({"source": "/a/../b", "destination": "/c"})) == ["/b", "/c"]


def test_a_fleet_call_matches_by_the_targets_its_selector_selects() -> None:
    from types import SimpleNamespace

    from gateway.approvals.gate import call_targets

    cfg = Settings.model_validate(
        {
            "targets": [
                {"name": "prod-db", "host": "h1", "labels": {"env": "prod"}},
                {"name": "staging-db", "host": "h2", "labels": {"env": "staging"}},
            ],
            "groups": {"dbs": ["prod-db", "staging-db"], "staging": ["staging-db"]},
        }
    )
    rt: Any = SimpleNamespace(settings=cfg)
    rules = (ApprovalRule(toolsets=("execute",), targets=("prod-*",)),)

    def gated(**arguments: Any) -> bool:
        targets = call_targets(rt, None, arguments)
        found = matching_rule(
            rules, ALICE, tool="exec_many", toolset="execute", targets=targets, arguments=arguments
        )
        return found is not None

    assert call_targets(rt, None, {"group": "dbs"}) == ("prod-db", "staging-db")
    assert gated(group="dbs")
    assert gated(labels={"env": "prod"})
    assert gated(targets=["prod-db"])
    assert not gated(group="staging")
    assert not gated(labels={"env": "staging"})
    assert gated(group="no-such-group")  # unresolvable: fail closed (the tool refuses it anyway)
    assert call_targets(rt, "prod-db", {}) == ("prod-db",)
    assert call_targets(rt, None, {}) is None


def test_a_rule_must_name_something_and_paths_are_absolute() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ApprovalRule()
    with pytest.raises(ValueError, match="absolute"):
        ApprovalRule(paths=("etc",))
    assert Settings.model_validate(GATED).approvals.rules[0].name == "health"


def test_the_digest_covers_every_argument_and_the_caller() -> None:
    base = {"tool": "t", "toolset": "root", "target": "a", "principal": "p", "rule": "r"}
    one = ShownRequest.of(**base, arguments={"argv": ["rm", "-rf", "/srv/x"]})
    assert one.digest == ShownRequest.of(**base, arguments={"argv": ["rm", "-rf", "/srv/x"]}).digest
    assert one.digest != ShownRequest.of(**base, arguments={"argv": ["rm", "-rf", "/srv/y"]}).digest
    assert one.digest != ShownRequest.of(**{**base, "principal": "q"}, arguments=dict(one.arguments)).digest
    assert one.still({"argv": ["rm", "-rf", "/srv/x"]})
    assert not one.still({"argv": ["rm", "-rf", "/"]})


async def test_only_another_human_can_decide_and_only_the_request_that_was_shown() -> None:
    clock = Clock()
    hub = ApprovalHub(30, clock=clock)
    shown = ShownRequest.of(
        tool="t", toolset="root", target="a", principal=ALICE.label, arguments={}, rule="r"
    )
    approval = hub.request(shown, ALICE)
    as_alice = Approver("proxy", "alice")
    bob = Approver("token", "bob")
    assert hub.decide(approval, as_alice, "approve", "", shown.digest) == "own_call"
    assert hub.decide(approval, bob, "approve", "", "0" * 64) == "altered"
    assert approval.state == "pending"
    assert hub.decide(approval, bob, "deny", "not today", shown.digest) is None
    assert (approval.state, approval.reason, approval.approver) == ("denied", "not today", bob)
    assert hub.decide(approval, bob, "approve", "", shown.digest) == "gone"  # decided once
    late = hub.request(shown, ALICE)
    clock.now += 30
    assert hub.decide(late, bob, "approve", "", shown.digest) == "gone"
    assert late.state == "expired"
    assert hub.counters["refused"] == 4


async def test_without_elicitation_the_call_fails_with_the_link_and_the_approved_retry_runs_once(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client(**GATED) as (client, rt):
        rt.approvals.serve_at("http://127.0.0.1:9")
        first = await client.call_tool("gateway_health", {})
        error = error_payload(first)
        assert error is not None
        assert error["code"] == "policy_denied"
        assert error["details"]["reason"] == "approval_required"
        assert error["retryable"] is True
        url = error["details"]["approval_url"]
        assert url == f"http://127.0.0.1:9/approvals/{error['details']['approval_id']}"
        assert url in error["message"]
        (pending,) = rt.approvals.pending()
        again = error_payload(await client.call_tool("gateway_health", {}))
        assert again is not None
        assert again["details"]["approval_id"] == pending.id  # the same request finds the same approval
        assert (
            rt.approvals.decide(pending, Approver("token", "ops"), "approve", "ok", pending.shown.digest)
            is None
        )
        ran = await client.call_tool("gateway_health", {})
        used = error_payload(await client.call_tool("gateway_health", {}))  # used once: a fresh approval
        audit = await read_audit(rt)
    assert not ran.is_error, ran
    assert used is not None
    assert used["details"]["reason"] == "approval_required"
    assert used["details"]["approval_id"] != pending.id
    records = [json.loads(line) for line in audit.splitlines() if '"tool_call"' in line]
    ok = [r for r in records if r["outcome"] == "ok"]
    assert len(ok) == 1
    assert ok[0]["principal"] == "test"
    assert ok[0]["facts"]["approval"]["approver"]["label"] == "operator:ops"
    assert ok[0]["facts"]["approval"]["digest"] == pending.shown.digest


async def _waiting_call(client: Any, progress: list[float], ticked: anyio.Event) -> types.CallToolResult:
    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if len(progress) >= 2:
            ticked.set()

    with anyio.fail_after(30):
        result: types.CallToolResult = await client.call_tool(
            "gateway_health", {}, progress_callback=on_progress
        )
        return result


async def _pending(rt: Any) -> Any:
    opened = anyio.Event()
    rt.approvals.add_listener(lambda approval: opened.set())
    if not rt.approvals.pending():
        with anyio.fail_after(10):
            await opened.wait()
    return rt.approvals.pending()[0]


WAITING = {"approvals": {**GATED["approvals"], "wait_without_elicitation": True, "progress_interval_s": 0.05}}


async def test_a_waiting_call_sends_progress_and_a_denial_is_policy_denied_with_the_reason(
    gateway_client: ClientFactory,
) -> None:
    progress: list[float] = []
    ticked = anyio.Event()
    async with gateway_client(**WAITING) as (client, rt), anyio.create_task_group() as tg:
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await _waiting_call(client, progress, ticked))

        tg.start_soon(call)
        approval = await _pending(rt)
        with anyio.fail_after(10):
            await ticked.wait()
        rt.approvals.decide(
            approval, Approver("token", "ops"), "deny", "not during business hours", approval.shown.digest
        )
    error = error_payload(results[0])
    assert error is not None
    assert error["code"] == "policy_denied"
    assert error["details"]["reason"] == "approval_denied"
    assert error["details"]["reason_text"] == "not during business hours"
    assert error["details"]["approver"] == "operator:ops"
    assert "not during business hours" in error["message"]


async def test_an_undecided_call_times_out_as_approval_timeout(gateway_client: ClientFactory) -> None:
    clock = Clock()
    progress: list[float] = []
    async with gateway_client(clock=clock, **WAITING) as (client, rt), anyio.create_task_group() as tg:
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await _waiting_call(client, progress, anyio.Event()))

        tg.start_soon(call)
        approval = await _pending(rt)
        clock.now = approval.expires  # approvals.timeout_s has passed
    error = error_payload(results[0])
    assert error is not None
    assert error["details"]["reason"] == "approval_timeout"
    assert approval.state == "expired"


async def _gate(rt: Any, arguments: dict[str, Any]) -> None:
    """The gate itself, as the dispatcher calls it, for a call by alice that waits (no elicitation)."""
    await await_approval(
        rt,
        principal=ALICE,
        tool="gateway_health",
        toolset="inspect",
        target=None,
        arguments=arguments,
        elicitor=None,
        report_progress=None,
        facts={},
    )


async def test_arguments_changed_after_they_were_shown_do_not_run(gateway_client: ClientFactory) -> None:
    """The gate re-hashes what is about to run: a change between showing and running is refused."""
    async with gateway_client(**WAITING) as (_, rt), anyio.create_task_group() as tg:
        arguments: dict[str, Any] = {}
        outcome: list[BaseException | None] = []

        async def gate() -> None:
            try:
                await _gate(rt, arguments)
                outcome.append(None)
            except Exception as exc:
                outcome.append(exc)

        tg.start_soon(gate)
        approval = await _pending(rt)
        arguments["sneaked_in"] = "rm -rf /"  # altered after it was shown
        rt.approvals.decide(approval, Approver("token", "ops"), "approve", "", approval.shown.digest)
    failure = outcome[0]
    assert failure is not None
    assert getattr(failure, "details", {})["reason"] == "approval_altered"


async def test_a_call_cancelled_while_it_waits_leaves_the_pending_list(gateway_client: ClientFactory) -> None:
    async with gateway_client(**WAITING) as (_, rt), anyio.create_task_group() as tg:

        async def gate() -> None:
            await _gate(rt, {})

        tg.start_soon(gate)
        approval = await _pending(rt)
        tg.cancel_scope.cancel()
    assert approval.state == "denied"
    assert "cancelled" in approval.reason
    assert rt.approvals.pending() == []


async def test_two_identical_waiting_calls_share_one_decision_but_only_one_runs(
    gateway_client: ClientFactory,
) -> None:
    second_waits = anyio.Event()
    async with gateway_client(**WAITING) as (client, rt), anyio.create_task_group() as tg:
        results: list[types.CallToolResult] = []

        async def call(ticked: anyio.Event) -> None:
            results.append(await _waiting_call(client, [], ticked))

        tg.start_soon(call, anyio.Event())
        approval = await _pending(rt)
        tg.start_soon(call, second_waits)
        with anyio.fail_after(10):
            await second_waits.wait()  # its progress: it waits too, on the same approval
        assert len(rt.approvals.pending()) == 1
        rt.approvals.decide(approval, Approver("token", "ops"), "approve", "", approval.shown.digest)
    errors = [error_payload(r) for r in results]
    assert sorted(e is None for e in errors) == [False, True]  # one ran, one did not
    refused = next(e for e in errors if e is not None)
    assert refused["details"]["reason"] == "approval_required"
