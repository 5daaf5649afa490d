"""Calls and errors: validation, caps, structured results, internal errors with incidents."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import mcp_types as types
import pytest
from mcp import MCPError
from structlog.testing import capture_logs

from gateway._catalog import Toolset, ToolSpec
from gateway._context import ToolContext
from gateway._dispatch import error_payload, oversized_argument
from gateway.tools._base import Input, Output
from tests.gateway.conftest import ClientFactory, read_audit


class _BoomIn(Input):
    note: str = ""


class _BoomOut(Output):
    never: str


async def _boom(_: ToolContext, __: _BoomIn) -> _BoomOut:
    raise RuntimeError("kaboom with a stack")


BOOM: ToolSpec[Any, Any, Any] = ToolSpec(
    name="test_boom",
    title="boom",
    description="raises.",
    input_model=_BoomIn,
    output_model=_BoomOut,
    toolset=Toolset.INSPECT,
    read_only=True,
    destructive=False,
    idempotent=True,
    open_world=False,
    handler=_boom,
)


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error is True
    assert result.structured_content is None  # would be validated against the success outputSchema
    err = error_payload(result)
    assert err is not None
    assert set(err) == {"code", "message", "retryable", "details"}
    return err


@pytest.mark.anyio
async def test_an_unknown_argument_is_a_validation_error(gateway_client: ClientFactory) -> None:
    async with gateway_client() as (client, _):
        result = await client.call_tool("gateway_health", {"verbose": True})
        err = _error(result)
        assert err["code"] == "validation_error"
        assert err["retryable"] is False
        assert err["details"]["errors"][0]["type"] == "extra_forbidden"


@pytest.mark.anyio
async def test_an_oversized_string_argument_is_refused_before_the_tool_runs(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client(extra_specs=[BOOM], server={"max_argument_bytes": 1024}) as (client, _):
        result = await client.call_tool("test_boom", {"note": "x" * 1025})
        err = _error(result)
        assert err["code"] == "validation_error"
        assert err["details"] == {"argument": "note", "limit_bytes": 1024, "use": "remote_upload"}


@pytest.mark.anyio
async def test_an_unexpected_exception_becomes_internal_error_with_a_logged_incident(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client(extra_specs=[BOOM]) as (client, rt):
        with capture_logs() as logs:
            result = await client.call_tool("test_boom", {})
        err = _error(result)
        assert err["code"] == "internal_error"
        incident = err["details"]["incident"]
        assert "kaboom" not in str(result.model_dump())  # no exception text or traceback to the client
        assert any(e.get("incident") == incident and e["event"] == "internal_error" for e in logs)
        audit = await read_audit(rt)
        assert incident in audit
        # the server survived: the next call works
        ok = await client.call_tool("gateway_health", {})
        assert ok.is_error is not True


@pytest.mark.anyio
async def test_results_carry_structured_content_matching_the_output_schema(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client() as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("gateway_health", {})
        assert result.is_error is not True
        jsonschema.validate(result.structured_content, tools["gateway_health"].output_schema)
        assert result.content
        assert result.content[0].type == "text"
        assert result.structured_content["own_tools"] == len(tools)


def test_oversized_argument_finds_nested_strings() -> None:
    assert oversized_argument({"a": ["ok", {"b": "é" * 40}]}, 64) == "a[1].b"
    assert oversized_argument({"a": ["ok"]}, 64) is None


@pytest.mark.anyio
async def test_a_tool_of_a_disabled_toolset_is_policy_denied_naming_the_toolset_and_the_key(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client(tools={"toolsets": ["inspect"]}) as (client, rt):
        assert client.instructions is not None
        assert "not enabled" in client.instructions
        assert "teardown" in client.instructions.split("not enabled")[1]
        err = _error(await client.call_tool("remote_delete", {"target": "t", "path": "/tmp/x"}))
        assert err["code"] == "policy_denied"
        assert err["details"] == {
            "tool": "remote_delete",
            "toolset": "teardown",
            "config_key": "tools.toolsets",
        }
        records = [json.loads(line) for line in (await read_audit(rt)).splitlines()]
    calls = [r for r in records if r.get("tool") == "remote_delete"]
    assert [(r["toolset"], r["error_code"]) for r in calls] == [("teardown", "policy_denied")]


@pytest.mark.anyio
async def test_a_tool_excluded_by_name_is_policy_denied_naming_tools_exclude(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client(tools={"exclude": ["remote_exec"]}) as (client, _rt):
        err = _error(await client.call_tool("remote_exec", {"target": "t", "argv": ["true"]}))
    assert err["code"] == "policy_denied"
    assert err["details"]["config_key"] == "tools.exclude"


@pytest.mark.anyio
async def test_a_tool_that_does_not_exist_is_still_an_unknown_tool_protocol_error(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client() as (client, _rt):
        with pytest.raises(MCPError) as info:
            await client.call_tool("no_such_tool", {})
    assert info.value.error.code == types.INVALID_PARAMS
