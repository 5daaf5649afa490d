"""The catalog fails closed and filters for real: filtered tools are neither listed nor callable."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from gateway._catalog import Toolset, ToolSpec, build_catalog
from gateway._context import ToolContext
from gateway._dispatch import error_payload
from gateway._errors import ConfigError
from gateway.tools import all_specs
from gateway.tools._base import Input, Output
from tests.gateway.conftest import ClientFactory


class _In(Input):
    value: str = "x"


class _Out(Output):
    echoed: str


async def _echo(_: ToolContext, args: _In) -> _Out:
    return _Out(echoed=args.value)


def _spec(name: str, toolset: Any) -> ToolSpec[Any, Any, Any]:
    return ToolSpec(
        name=name,
        title=name,
        description="test tool.",
        input_model=_In,
        output_model=_Out,
        toolset=toolset,
        read_only=False,
        destructive=True,
        idempotent=False,
        open_world=True,
        handler=_echo,
    )


def test_a_tool_without_a_valid_toolset_stops_startup() -> None:
    with pytest.raises(ConfigError, match="no valid own toolset"):
        build_catalog([_spec("bad", "misc")], toolsets=["inspect"])
    with pytest.raises(ConfigError, match="no valid own toolset"):
        build_catalog([_spec("bad", Toolset.UPSTREAM)], toolsets=["inspect"])


def test_an_unknown_toolset_name_stops_startup() -> None:
    with pytest.raises(ConfigError) as info:
        build_catalog([_spec("a", Toolset.INSPECT)], toolsets=["inspect", "exceute"])
    assert info.value.key == "tools.toolsets"


@pytest.mark.parametrize("field", ["include", "exclude"])
def test_an_unknown_tool_name_in_include_or_exclude_stops_startup(field: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_catalog([_spec("a", Toolset.INSPECT)], toolsets=["inspect"], **{field: ["remote_exce"]})
    assert info.value.key == f"tools.{field}"


def test_toolsets_include_and_exclude_choose_the_enabled_tools() -> None:
    specs = [_spec("r", Toolset.INSPECT), _spec("x", Toolset.EXECUTE), _spec("k", Toolset.TEARDOWN)]
    cat = build_catalog(specs, toolsets=["inspect"], include=["k"], exclude=["r"])
    assert sorted(cat.enabled) == ["k"]
    assert cat.filtered_out == ("r", "x")


def test_every_own_tool_is_fully_declared() -> None:
    names = set()
    for spec in all_specs():
        assert spec.name not in names
        names.add(spec.name)
        assert isinstance(spec.toolset, Toolset)
        assert spec.toolset is not Toolset.UPSTREAM
        for hint in ("read_only", "destructive", "idempotent", "open_world"):
            assert isinstance(getattr(spec, hint), bool), (spec.name, hint)
        assert spec.input_model.model_config.get("extra") == "forbid", spec.name
        assert issubclass(spec.output_model, BaseModel)
        if spec.read_only:
            assert spec.toolset is Toolset.INSPECT, f"{spec.name}: read-only tools belong to inspect"
        tool = spec.to_mcp()
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None


@pytest.mark.anyio
async def test_filtered_tools_are_not_listed_and_a_call_is_policy_denied_naming_the_toolset(
    gateway_client: ClientFactory,
) -> None:
    extra = [_spec("test_execute_tool", Toolset.EXECUTE), _spec("test_teardown_tool", Toolset.TEARDOWN)]
    async with gateway_client(extra_specs=extra, tools={"toolsets": ["inspect", "teardown"]}) as (client, rt):
        listed = {t.name for t in (await client.list_tools()).tools}
        assert "test_teardown_tool" in listed
        assert "test_execute_tool" not in listed
        assert "test_execute_tool" in rt.catalog.filtered_out
        refused = await client.call_tool("test_execute_tool", {})
        error = error_payload(refused)
        assert error is not None
        assert (error["code"], error["details"]["toolset"]) == ("policy_denied", "execute")
        ok = await client.call_tool("test_teardown_tool", {"value": "v"})
        assert ok.structured_content == {"echoed": "v"}


def test_spec_is_immutable() -> None:
    spec = _spec("a", Toolset.INSPECT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "b"  # type: ignore[misc]
