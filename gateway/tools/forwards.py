"""Managed SSH port forwards: thin adapters over :class:`remoteops.ForwardManager`."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from gateway._context import ToolContext
from gateway.tools._base import Input, Output
from gateway.tools._registry import CHANGE, READ, TEARDOWN, ToolGroup
from remoteops import ForwardClosed, ForwardCreated, ForwardSpec, ForwardView

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs

# Checked by a validator rather than a schema ``pattern`` (the schema stays plain JSON Schema).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ID = re.compile(r"^fwd-[0-9a-f]{12}$")


# remoteops' forward request (target, kind, addresses, ports: checked there), and a name. No docstring:
# it would become the published schema's description.
class CreateIn(ForwardSpec):
    name: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Optional stable name: a healthy forward of this name and specification is returned "
        "(reused: true); the same name with another specification is a conflict.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError("letters, digits, '_', '.', '-'; starting with a letter or digit")
        return value


class ForwardIdIn(Input):
    id: str = Field(min_length=1, max_length=64, description="A forward id (fwd-…) from forward_create.")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError("not a forward id (fwd- and 12 hex digits)")
        return value


class ListIn(Input):
    pass


class ListOut(Output):
    forwards: list[ForwardView]


def _line(v: ForwardView) -> str:
    dest = f" -> {v.dest_host}:{v.dest_port}" if v.dest_host else " (SOCKS5)"
    health = "unchecked" if v.last_health is None else ("healthy" if v.last_health.healthy else "UNHEALTHY")
    label = f"{v.id} ({v.name})" if v.name else v.id
    where = f"{v.kind} {v.bind_address}:{v.bind_port}{dest} on {v.target}"
    return f"{label}: {where}; {v.state}, {health}"


def _render_created(out: ForwardCreated) -> str:
    return ("reused " if out.reused else "created ") + _line(out.forward)


def _render_list(out: ListOut) -> str:
    return "\n".join(_line(v) for v in out.forwards) or "no forwards"


def _render_closed(out: ForwardClosed) -> str:
    return f"{out.id}: {out.outcome} (signalled: {out.signalled}; record removed: {out.record_removed})"


@_tools.tool(
    "forward_create",
    "Create an SSH port forward",
    "Start a managed -L/-R/-D forward as its own ssh process; returns it once every listener is confirmed "
    "(ExitOnForwardFailure), with the chosen port. Named forwards are reused.",
    kind=CHANGE,
    render=_render_created,
    destructive=False,
)
async def forward_create(ctx: ToolContext, args: CreateIn) -> ForwardCreated:
    spec = ForwardSpec(
        target=args.target,
        kind=args.kind,
        bind_address=args.bind_address,
        bind_port=args.bind_port,
        dest_host=args.dest_host,
        dest_port=args.dest_port,
    )
    return await ctx.runtime.forwards.create(spec, name=args.name)


@_tools.tool(
    "forward_list",
    "List SSH port forwards",
    "Every managed forward (active or lost, adopted after a restart or not) with its last health check.",
    render=_render_list,
    open_world=False,
)
async def forward_list(ctx: ToolContext, _: ListIn) -> ListOut:
    views = await ctx.runtime.forwards.list()
    visible = set(ctx.visible_targets(sorted({v.target for v in views})))  # a restricted caller: its own
    return ListOut(forwards=[v for v in views if v.target in visible])


@_tools.tool(
    "forward_status",
    "Check an SSH port forward",
    "Check one forward now, each check reported separately: its process identity, a TCP connect to the "
    "local listener (-L/-D), a SOCKS5 handshake (-D), ss on the target (-R).",
    render=_line,
)
async def forward_status(ctx: ToolContext, args: ForwardIdIn) -> ForwardView:
    ctx.check_target("forward_status", ctx.runtime.forwards.target_of(args.id))
    return await ctx.runtime.forwards.status(args.id)


@_tools.tool(
    "forward_close",
    "Close an SSH port forward",
    "Stop a forward's ssh (SIGTERM, then SIGKILL; its identity is re-checked before each, so a recycled "
    "PID is never signalled) and drop its record. Unknown ids are not_found.",
    kind=TEARDOWN,
    render=_render_closed,
    open_world=False,
)
async def forward_close(ctx: ToolContext, args: ForwardIdIn) -> ForwardClosed:
    ctx.check_target("forward_close", ctx.runtime.forwards.target_of(args.id))
    return await ctx.runtime.forwards.close(args.id)
