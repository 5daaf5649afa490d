"""The tool catalog: every own tool declared once, classified into exactly one toolset.

A :class:`ToolSpec` carries name, title, description, input and output models, the four MCP annotation
hints and its toolset. :func:`build_catalog` applies the operator's choice (toolsets, extra tools,
excluded tools) and fails closed: a tool without a valid toolset, or an unknown toolset or tool name in
the configuration, stops startup with a clear message.

This module is the bottom of the gateway's tool layer: it knows neither the handlers' context
(``gateway._context``) nor the runtime (``gateway._runtime``, which builds a :class:`Catalog`). A spec is
generic in the context its handler takes; the tools bind it (``gateway.tools._registry``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

import mcp_types as types
from pydantic import BaseModel

from gateway._errors import ConfigError

__all__ = ["AnySpec", "Catalog", "ToolSpec", "Toolset", "build_catalog"]


class Toolset(StrEnum):
    INSPECT = "inspect"
    """Reads only."""
    MANAGE = "manage"
    """Changes gateway-side state; runs no caller-supplied command."""
    EXECUTE = "execute"
    """Runs commands, starts processes, writes remote files."""
    TEARDOWN = "teardown"
    """Kills, deletes, closes."""
    ROOT = "root"
    """Anything with elevated privilege."""
    UPSTREAM = "upstream"
    """Tools relayed from upstream MCP servers (gated per name in each upstream's configuration)."""


CtxT = TypeVar("CtxT")
InT = TypeVar("InT", bound=BaseModel)
OutT = TypeVar("OutT", bound=BaseModel)


@dataclass(frozen=True)
class ToolSpec(Generic[CtxT, InT, OutT]):
    name: str
    title: str
    description: str
    input_model: type[InT]
    output_model: type[OutT]
    toolset: Toolset
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    handler: Callable[[CtxT, InT], Awaitable[OutT]]
    render: Callable[[OutT], str] = field(default=lambda out: out.model_dump_json(indent=None))
    """Short text rendering placed in ``content`` next to ``structuredContent``."""
    text_field: str | None = None
    """An output field (a string) carried once, as the result's second text block (``content[1]``), and
    left out of ``structuredContent`` (the output schema does not require it): a large payload the model
    should see once — a file's content — instead of twice (in ``structuredContent`` and in the text)."""
    unavailable: Callable[[Any], str | None] | None = None
    """Given the gateway settings: why the tool cannot be offered (e.g. nothing configured), or None."""

    def to_mcp(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.input_model.model_json_schema(),
            output_schema=self.output_model.model_json_schema(),
            annotations=types.ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.idempotent,
                open_world_hint=self.open_world,
            ),
        )


AnySpec = ToolSpec[Any, Any, Any]


@dataclass(frozen=True)
class Catalog:
    """The own tools the operator enabled, plus what was filtered out (shown by gateway_health)."""

    enabled: dict[str, AnySpec]
    filtered_out: tuple[str, ...]
    toolsets: frozenset[Toolset]
    unavailable: dict[str, str] = field(default_factory=dict)
    """Filtered-out tools the operator enabled but the configuration cannot serve: name -> reason."""
    declared: dict[str, AnySpec] = field(default_factory=dict)
    """Every own tool, enabled or not (to say why a disabled one is not served)."""
    excluded: frozenset[str] = frozenset()
    """Names in ``tools.exclude``."""

    def get(self, name: str) -> AnySpec | None:
        return self.enabled.get(name)

    def why_disabled(self, name: str) -> tuple[str, dict[str, str]] | None:
        """For an own tool that is not served: a sentence saying how to enable it, and its details."""
        spec = self.declared.get(name)
        if spec is None or name in self.enabled:
            return None
        toolset = spec.toolset.value
        if name in self.unavailable:
            reason = self.unavailable[name]
            return f"tool {name!r} is not available: {reason}", {"toolset": toolset, "reason": reason}
        if name in self.excluded:
            return (
                f"tool {name!r} is disabled by tools.exclude in the gateway's configuration",
                {"toolset": toolset, "config_key": "tools.exclude"},
            )
        return (
            f"tool {name!r} belongs to the {toolset!r} toolset, which is not enabled: the operator adds "
            f"{toolset!r} to tools.toolsets (or the tool to tools.include) in the gateway's configuration",
            {"toolset": toolset, "config_key": "tools.toolsets"},
        )

    def tools(self) -> list[types.Tool]:
        return [spec.to_mcp() for spec in self.enabled.values()]


def _parse_toolsets(names: Iterable[str]) -> frozenset[Toolset]:
    valid = {t.value for t in Toolset}
    out: set[Toolset] = set()
    for name in names:
        if name not in valid:
            raise ConfigError(
                f"unknown toolset {name!r}; valid toolsets: {', '.join(sorted(valid))}",
                key="tools.toolsets",
            )
        out.add(Toolset(name))
    return frozenset(out)


def build_catalog(
    specs: Sequence[AnySpec],
    *,
    toolsets: Iterable[str],
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    settings: Any = None,
) -> Catalog:
    """Apply the operator's choice to the declared tools. Fail closed on anything unclassified or unknown."""
    by_name: dict[str, AnySpec] = {}
    for spec in specs:
        if not isinstance(spec.toolset, Toolset) or spec.toolset is Toolset.UPSTREAM:
            raise ConfigError(
                f"tool {spec.name!r} has no valid own toolset ({spec.toolset!r}); refusing to start"
            )
        if spec.name in by_name:
            raise ConfigError(f"tool {spec.name!r} is declared twice")
        by_name[spec.name] = spec
    chosen = _parse_toolsets(toolsets)
    include_set, exclude_set = set(include), set(exclude)
    for key, names in (("tools.include", include_set), ("tools.exclude", exclude_set)):
        unknown = sorted(names - by_name.keys())
        if unknown:
            raise ConfigError(f"unknown tool name(s) {', '.join(unknown)}", key=key)
    both = sorted(include_set & exclude_set)
    if both:
        raise ConfigError(f"tool(s) both included and excluded: {', '.join(both)}", key="tools.include")
    enabled: dict[str, AnySpec] = {}
    filtered: list[str] = []
    unavailable: dict[str, str] = {}
    for name, spec in by_name.items():
        on = (spec.toolset in chosen or name in include_set) and name not in exclude_set
        reason = spec.unavailable(settings) if on and spec.unavailable is not None else None
        if reason is not None:
            unavailable[name] = reason
            on = False
        if on:
            enabled[name] = spec
        else:
            filtered.append(name)
    return Catalog(
        enabled=enabled,
        filtered_out=tuple(sorted(filtered)),
        toolsets=chosen,
        unavailable=unavailable,
        declared=by_name,
        excluded=frozenset(exclude_set),
    )
