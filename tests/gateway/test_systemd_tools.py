"""The systemd tools through MCP (in-process client → gateway → a real systemd target over SSH): each
failure arrives as its error code; ``root.targets`` decides who may escalate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from acceptance.harness.systemd_helpers import SystemdHost, booted, unavailable_reason
from tests.gateway.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def host() -> Iterator[SystemdHost]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot boot a systemd target here: {reason}")
    with booted() as booted_host:
        yield booted_host


def _settings(host: SystemdHost) -> dict[str, Any]:
    return {
        "transport": {
            "ssh_config_file": str(host.settings.ssh_config_file),
            "control_dir": str(host.settings.control_dir),
        },
        "targets": [{"name": "sd", "host": "rogsd"}, {"name": "other", "host": "rogsd"}],
        "root": {"targets": ["sd"], "providers": ["sudo_nopasswd"]},
        "tools": {"toolsets": ["inspect", "execute"]},
    }


async def _call(client: Client, tool: str, **args: Any) -> types.CallToolResult:
    with anyio.fail_after(90):
        return await client.call_tool(tool, args)


def _code(result: types.CallToolResult) -> str:
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    return str(json.loads(result.content[0].text)["error"]["code"])


async def test_each_systemd_tool_fails_with_its_error_code(
    host: SystemdHost, gateway_client: ClientFactory
) -> None:
    async with gateway_client(**_settings(host)) as (client, _):
        before = host.processes()
        for tool, args in (
            ("systemd_unit_status", {"target": "sd", "units": ["foo;reboot.service"]}),
            ("systemd_unit_action", {"target": "sd", "unit": "-x.service", "action": "start"}),
            ("service_start", {"target": "sd", "service": "a b"}),
            ("journal_read", {"target": "sd", "unit": "$(id).service"}),
            ("systemd_unit_dependencies", {"target": "sd", "unit": "x\\y.service"}),
        ):
            assert _code(await _call(client, tool, **args)) == "validation_error", tool
        assert host.processes() == before
        missing = await _call(client, "service_status", target="sd", service="rog-nothing")
        assert _code(missing) == "not_found"
        denied = await _call(
            client, "systemd_unit_action", target="other", unit="rog-sleep.service", action="start",
            privilege="root",
        )  # fmt: skip
        assert _code(denied) == "policy_denied"
        tx = await _call(
            client, "admin_transaction", target="other", privilege="root",
            change={"kind": "unit_action", "unit": "rog-sleep.service", "action": "start"},
            gates=[{"kind": "unit_active", "unit": "rog-sleep.service"}],
        )  # fmt: skip
        assert _code(tx) == "policy_denied"
        none = await _call(
            client, "admin_transaction", target="sd",
            change={"kind": "unit_action", "unit": "rog-sleep.service", "action": "start"}, gates=[],
        )  # fmt: skip
        assert _code(none) == "validation_error"


async def test_auto_escalates_on_root_targets_only_and_the_result_names_every_attempt(
    host: SystemdHost, gateway_client: ClientFactory
) -> None:
    async with gateway_client(**_settings(host)) as (client, _):
        kept_user = await _call(client, "service_start", target="other", service="rog-sleep")
        assert not kept_user.is_error
        out = kept_user.structured_content or {}
        assert out["job_result"] == "failed"
        assert [a["outcome"] for a in out["privilege"]["attempts"]] == ["denied", "skipped"]
        started = await _call(client, "service_start", target="sd", service="rog-sleep")
        out = started.structured_content or {}
        assert out["job_result"] == "done"
        assert out["after"]["active_state"] == "active"
        assert out["privilege"]["provider"] == "sudo_nopasswd"
        stopped = await _call(client, "service_stop", target="sd", service="rog-sleep.service")
        assert (stopped.structured_content or {})["after"]["active_state"] == "inactive"
