"""Target grants also hold for tools that name a task or a forward by id: the record's target decides,
before the target is touched; the lists show a restricted caller only its targets' entries.

A real runtime against the real sshd; the calls go through the dispatcher with a real policy and an OAuth
principal (what the HTTP layer builds from a verified token)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.auth.provider import AccessToken

from gateway._dispatch import dispatch_call, error_payload
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.auth.policy import GROUPS_CLAIM, KIND_CLAIM, Policy, Principal
from gateway.config import Settings
from gateway.tools import all_specs
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.task_helpers import remote_root

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.anyio]

OPERATOR = Principal.operator("stdio", "operator")
SCOPES = ["remoteops:inspect", "remoteops:execute", "remoteops:teardown"]


@pytest.fixture
def root() -> Iterator[Path]:
    with remote_root() as path:
        yield path


@pytest.fixture
async def runtime(sshd: SshdInstance, root: Path, tmp_path: Path) -> AsyncIterator[Runtime]:
    cfg = Settings.model_validate(
        {
            "state_dir": str(tmp_path / "state"),
            "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
            # Two names for the one test sshd: alice is granted "mine" only.
            "targets": [
                {"name": "mine", "host": sshd.alias("plain")},
                {"name": "theirs", "host": sshd.alias("plain")},
            ],
            "tasks": {"remote_dir": str(root)},
            "tools": {"toolsets": ["inspect", "execute", "teardown"]},
            "auth": {"grants": [{"subject": "alice", "targets": ["mine"]}]},
        }
    )
    async with Runtime(cfg, all_specs(), redactor=Redactor()) as rt:
        yield rt


def _alice(policy: Policy) -> Principal:
    token = AccessToken(
        token="t",
        client_id="c",
        scopes=SCOPES,
        subject="alice",
        claims={KIND_CLAIM: "oauth", GROUPS_CLAIM: []},
    )
    return policy.principal(token, OPERATOR)


async def _call(rt: Runtime, who: Principal, tool: str, **args: Any) -> tuple[str | None, dict[str, Any]]:
    """(error code or None, structured result) of one call through the dispatcher."""
    policy = Policy.from_settings(rt.settings.auth)
    with anyio.fail_after(60):
        result = await dispatch_call(
            rt, types.CallToolRequestParams(name=tool, arguments=args), principal=who, policy=policy
        )
    payload = error_payload(result)
    if payload is not None:
        return str(payload["code"]), dict(payload)
    return None, dict(result.structured_content or {})


async def test_task_tools_by_id_refuse_a_task_on_a_target_outside_the_callers_grants(
    runtime: Runtime,
) -> None:
    alice = _alice(Policy.from_settings(runtime.settings.auth))
    code, theirs = await _call(runtime, OPERATOR, "task_start", target="theirs", argv=["sleep", "300"])
    assert code is None, theirs
    code, mine = await _call(runtime, alice, "task_start", target="mine", argv=["sleep", "300"])
    assert code is None, mine
    try:
        refused = {
            tool: (await _call(runtime, alice, tool, task_id=theirs["id"], **extra))[0]
            for tool, extra in [
                ("task_status", {}),
                ("task_output", {}),
                ("task_wait", {"timeout_s": 1}),
                ("task_cancel", {}),
            ]
        }
        assert refused == dict.fromkeys(refused, "policy_denied")
        assert (await _call(runtime, alice, "task_status", task_id=mine["id"]))[1]["state"] == "running"
        _, listed = await _call(runtime, alice, "task_list")
        assert ([t["id"] for t in listed["tasks"]], listed["total"]) == ([mine["id"]], 1)
        _, everything = await _call(runtime, OPERATOR, "task_list")
        assert {t["id"] for t in everything["tasks"]} == {mine["id"], theirs["id"]}
        assert (await _call(runtime, OPERATOR, "task_status", task_id=theirs["id"]))[1]["state"] == "running"
    finally:
        for task in (theirs, mine):
            await _call(runtime, OPERATOR, "task_cancel", task_id=task["id"])
    with anyio.fail_after(10):
        await runtime.audit.flush()
    records = [json.loads(line) for line in runtime.settings.audit_path.read_text().splitlines()]
    denied = [r for r in records if r["principal"] == "oauth:alice" and r["error_code"] == "policy_denied"]
    assert {r["tool"] for r in denied} == {"task_status", "task_output", "task_wait", "task_cancel"}
    assert {r["facts"]["target"] for r in denied} == {"theirs"}  # the audit names the task's target


async def test_forward_tools_by_id_refuse_a_forward_on_a_target_outside_the_callers_grants(
    runtime: Runtime,
) -> None:
    alice = _alice(Policy.from_settings(runtime.settings.auth))
    code, created = await _call(runtime, OPERATOR, "forward_create", target="theirs", kind="dynamic")
    assert code is None, created
    forward = created["forward"]
    try:
        assert (await _call(runtime, alice, "forward_status", id=forward["id"]))[0] == "policy_denied"
        assert (await _call(runtime, alice, "forward_close", id=forward["id"]))[0] == "policy_denied"
        assert (await _call(runtime, alice, "forward_list"))[1]["forwards"] == []
        listed = (await _call(runtime, OPERATOR, "forward_list"))[1]["forwards"]
        assert [f["id"] for f in listed] == [forward["id"]]  # still there: the refused close did nothing
    finally:
        code, closed = await _call(runtime, OPERATOR, "forward_close", id=forward["id"])
    assert code is None, closed
