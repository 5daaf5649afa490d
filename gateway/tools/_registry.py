"""Tool declarations next to their handlers: ``@group.tool(name, title, description)`` on the handler.

Each tool module makes one :class:`ToolGroup` with the classification its tools share (a :class:`Kind`:
toolset and the four MCP annotation hints, plus ``unavailable`` when the whole group depends on
configuration); a tool states only what differs. The input and output models are the handler's own
annotations (``async def remote_stat(ctx: ToolContext, args: StatIn) -> StatOut``), so they are declared
once. ``group.specs`` lists the group's tools in declaration order, which is the catalog order.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from gateway._catalog import AnySpec, Toolset, ToolSpec
from gateway._context import ToolContext

__all__ = ["CHANGE", "READ", "TEARDOWN", "Kind", "ToolGroup", "no_local_roots"]


def no_local_roots(settings: Any) -> str | None:
    """Why a tool that reads gateway-host files is not offered: no ``[transfers] local_roots`` (else None)."""
    roots = getattr(getattr(settings, "transfers", None), "local_roots", ())
    return None if roots else "no [transfers] local_roots configured"


Handler = TypeVar("Handler", bound=Callable[[ToolContext, Any], Awaitable[BaseModel]])


@dataclass(frozen=True)
class Kind:
    """A tool's toolset and MCP annotation hints."""

    toolset: Toolset
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


READ = Kind(Toolset.INSPECT, read_only=True, destructive=False, idempotent=True, open_world=True)
"""Only reads (from a target, or gateway state when ``open_world=False``)."""
CHANGE = Kind(Toolset.EXECUTE, read_only=False, destructive=True, idempotent=False, open_world=True)
"""Runs a command, starts a process or changes a target."""
TEARDOWN = Kind(Toolset.TEARDOWN, read_only=False, destructive=True, idempotent=False, open_world=True)
"""Kills, deletes, closes."""


def _models(handler: Callable[..., Any]) -> tuple[type[BaseModel], type[BaseModel]]:
    """The handler's argument and result models, from its annotations (``(ctx, args) -> Out``)."""
    hints = typing.get_type_hints(handler)
    params = list(inspect.signature(handler).parameters)
    if len(params) != 2:
        raise TypeError(f"tool handler {handler.__qualname__} must take (ctx, args)")
    models = (hints.get(params[1]), hints.get("return"))
    for model in models:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"tool handler {handler.__qualname__} needs pydantic model annotations")
    return models  # type: ignore[return-value]  # both checked just above


class ToolGroup:
    """The tools of one module, with the classification they share."""

    def __init__(self, kind: Kind, *, unavailable: Callable[[Any], str | None] | None = None) -> None:
        self.kind = kind
        self.unavailable = unavailable
        self.specs: list[AnySpec] = []

    def tool(
        self,
        name: str,
        title: str,
        description: str,
        *,
        kind: Kind | None = None,
        render: Callable[[Any], str] | None = None,
        text_field: str | None = None,
        toolset: Toolset | None = None,
        read_only: bool | None = None,
        destructive: bool | None = None,
        idempotent: bool | None = None,
        open_world: bool | None = None,
    ) -> Callable[[Handler], Handler]:
        """Declare the decorated handler as tool ``name``: the group's kind (or ``kind``), with the hints
        given here overriding it; ``render`` (given the handler's result) is the short text next to
        ``structuredContent``; ``text_field`` names an output field carried once, as a text block of
        its own, instead of in ``structuredContent`` (``ToolSpec.text_field``)."""
        base = kind or self.kind
        hints = Kind(
            toolset=base.toolset if toolset is None else toolset,
            read_only=base.read_only if read_only is None else read_only,
            destructive=base.destructive if destructive is None else destructive,
            idempotent=base.idempotent if idempotent is None else idempotent,
            open_world=base.open_world if open_world is None else open_world,
        )

        def declare(handler: Handler) -> Handler:
            input_model, output_model = _models(handler)
            extra: dict[str, Any] = {} if render is None else {"render": render}
            if text_field is not None:
                extra["text_field"] = text_field
            spec: ToolSpec[ToolContext, Any, Any] = ToolSpec(
                name=name,
                title=title,
                description=description,
                input_model=input_model,
                output_model=output_model,
                toolset=hints.toolset,
                read_only=hints.read_only,
                destructive=hints.destructive,
                idempotent=hints.idempotent,
                open_world=hints.open_world,
                handler=handler,
                unavailable=self.unavailable,
                **extra,
            )
            self.specs.append(spec)
            return handler

        return declare
