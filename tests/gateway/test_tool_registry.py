"""Tool declarations sit on their handlers: the group's classification applies unless a tool says
otherwise, the models come from the handler's annotations, and the tool arguments reuse remoteops'
request models."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway._catalog import Toolset
from gateway._context import ToolContext
from gateway.tools import all_specs
from gateway.tools._base import Input, Output
from gateway.tools._registry import CHANGE, READ, TEARDOWN, ToolGroup
from remoteops import CommandRequest, ForwardSpec


class _In(Input):
    value: str = "x"


class _Out(Output):
    echoed: str


def test_a_tool_takes_its_groups_classification_and_overrides_only_what_it_names() -> None:
    group = ToolGroup(READ)

    @group.tool("t_read", "Read", "Reads.")
    async def plain(ctx: ToolContext, args: _In) -> _Out:
        return _Out(echoed=args.value)

    @group.tool("t_local", "Local", "Reads gateway state.", open_world=False)
    async def local(ctx: ToolContext, args: _In) -> _Out:
        return _Out(echoed=args.value)

    @group.tool("t_kill", "Kill", "Kills.", kind=TEARDOWN, idempotent=True)
    async def kill(ctx: ToolContext, args: _In) -> _Out:
        return _Out(echoed=args.value)

    got = [(s.name, s.toolset, s.read_only, s.destructive, s.idempotent, s.open_world) for s in group.specs]
    assert got == [
        ("t_read", Toolset.INSPECT, True, False, True, True),
        ("t_local", Toolset.INSPECT, True, False, True, False),
        ("t_kill", Toolset.TEARDOWN, False, True, True, True),
    ]
    assert {(s.input_model, s.output_model) for s in group.specs} == {(_In, _Out)}
    assert [s.handler for s in group.specs] == [plain, local, kill]


def test_a_handler_without_model_annotations_is_refused_at_declaration() -> None:
    group = ToolGroup(CHANGE)
    with pytest.raises(TypeError):

        @group.tool("t_bad", "Bad", "No models.")
        async def bad(ctx: ToolContext, args: dict) -> dict:  # type: ignore[type-arg]
            return args

    assert group.specs == []


def test_tools_that_take_a_command_or_a_forward_take_remoteops_request_models() -> None:
    by_name = {spec.name: spec for spec in all_specs()}
    for name in ("remote_exec", "remote_root_exec", "task_start"):
        assert issubclass(by_name[name].input_model, CommandRequest), name
    assert issubclass(by_name["forward_create"].input_model, ForwardSpec)
    with pytest.raises(ValidationError) as info:
        by_name["task_start"].input_model.model_validate(
            {"target": "web", "argv": ["env"], "env": {"A B": "1"}}
        )
    assert [err["loc"] for err in info.value.errors()] == [("env",)]
