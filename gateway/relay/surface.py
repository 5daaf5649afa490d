"""The gateway side of relaying resources, resource templates and prompts: gate, merge, route.

Definitions and results pass through unchanged, exactly as for tools (``gateway.relay.tools``). The gating:

* they belong to the ``upstream`` toolset (off → nothing relayed, capabilities not advertised);
* each upstream's ``include``/``exclude`` lists apply to them as to its tools, by *prompt name*, by
  *resource URI* and by *URI template* (the ``uriTemplate`` string as listed). A resource whose URI
  matches a filtered template is filtered too. ``resources/read`` of a URI is routed only to an
  upstream that lists it, or whose *served* templates match it and none of whose filtered templates
  does; anything else is refused exactly like an unknown URI (``-32602``) — filtered and unknown look
  the same, as for tools;
* collisions follow the tools' rule: a prompt name (after ``prefix``) already served — by the gateway
  itself or by an earlier upstream — is dropped (``prefer_own``) or served as ``upstream_<name>``
  (``prefix_upstream``). URIs and URI templates cannot be renamed without rewriting results (they
  appear inside them), so a URI or template string an earlier upstream already serves is always
  dropped. Every drop and rename is listed in ``gateway_health``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from gateway.config import UpstreamEntry
from gateway.relay.uritemplate import TemplateError, matches

__all__ = ["RelayedPrompt", "SurfaceView", "Taken", "build_surface_view", "counts"]


@dataclass(frozen=True)
class RelayedPrompt:
    exposed_name: str
    original_name: str
    upstream_index: int


@dataclass
class Taken:
    """What is already served when one upstream's view is built (own entries and earlier upstreams)."""

    prompts: dict[str, str] = field(default_factory=dict)
    uris: dict[str, str] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)
    """Each maps the served key to who serves it (an upstream name, or ``gateway``)."""


@dataclass
class SurfaceView:
    """What one upstream currently contributes: its served lists, routes and refusals."""

    known: bool = False
    """False until the upstream's lists have been learnt once (it has never connected)."""
    resources: list[types.Resource] = field(default_factory=list)
    templates: list[types.ResourceTemplate] = field(default_factory=list)
    prompts: list[types.Prompt] = field(default_factory=list)
    prompt_routes: dict[str, RelayedPrompt] = field(default_factory=dict)
    refused_templates: list[str] = field(default_factory=list)
    refused_uris: set[str] = field(default_factory=set)
    dropped: list[dict[str, str]] = field(default_factory=list)
    renamed: list[dict[str, str]] = field(default_factory=list)

    def serves_uri(self, uri: str) -> bool:
        return any(resource.uri == uri for resource in self.resources)

    def refuses(self, uri: str) -> bool:
        """A filtered URI, or one a filtered template matches (an unparsable one matches everything)."""
        if uri in self.refused_uris:
            return True
        for template in self.refused_templates:
            try:
                if matches(template, uri):
                    return True
            except TemplateError:
                return True  # fail closed: a filter that cannot be evaluated refuses
        return False

    def template_serves(self, uri: str) -> bool:
        for template in self.templates:
            try:
                if matches(template.uri_template, uri):
                    return True
            except TemplateError:
                continue
        return False

    def claim(self, taken: Taken, owner: str) -> None:
        """Record what this view serves, so later upstreams collide with it."""
        for name in self.prompt_routes:
            taken.prompts.setdefault(name, owner)
        for resource in self.resources:
            taken.uris.setdefault(resource.uri, owner)
        for template in self.templates:
            taken.templates.setdefault(template.uri_template, owner)


def _filtered(entry: UpstreamEntry, key: str) -> str | None:
    if entry.include and key not in entry.include:
        return "not in include list"
    if key in entry.exclude:
        return "excluded"
    return None


def build_surface_view(
    entry: UpstreamEntry,
    index: int,
    *,
    resources: Sequence[types.Resource],
    templates: Sequence[types.ResourceTemplate],
    prompts: Sequence[types.Prompt],
    taken: Taken,
) -> SurfaceView:
    """Gate one upstream's lists (include/exclude, collisions with ``taken``) into a view."""
    view = SurfaceView(known=True)
    for template in templates:
        key = template.uri_template
        reason = _filtered(entry, key)
        if reason is not None:
            view.refused_templates.append(key)
            view.dropped.append({"kind": "resource_template", "name": key, "reason": reason})
            continue
        if key in taken.templates:
            reason = f"collides with the same template of {taken.templates[key]!r}"
            view.dropped.append({"kind": "resource_template", "name": key, "reason": reason})
            continue
        view.templates.append(template)
    for resource in resources:
        uri = resource.uri
        reason = _filtered(entry, uri)
        if reason is None and view.refuses(uri):
            reason = "matches a filtered template"
        if reason is not None:
            view.refused_uris.add(uri)
            view.dropped.append({"kind": "resource", "name": uri, "reason": reason})
            continue
        if uri in taken.uris:
            reason = f"collides with the same URI of {taken.uris[uri]!r}"
            view.dropped.append({"kind": "resource", "name": uri, "reason": reason})
            continue
        view.resources.append(resource)
    for prompt in prompts:
        _add_prompt(view, entry, index, prompt, taken)
    return view


def _add_prompt(
    view: SurfaceView, entry: UpstreamEntry, index: int, prompt: types.Prompt, taken: Taken
) -> None:
    original = prompt.name
    reason = _filtered(entry, original)
    if reason is not None:
        view.dropped.append({"kind": "prompt", "name": original, "reason": reason})
        return
    exposed = entry.prefix + original
    if exposed in taken.prompts or exposed in view.prompt_routes:
        if entry.on_collision == "prefer_own":
            view.dropped.append({"kind": "prompt", "name": original, "reason": f"collides with {exposed!r}"})
            return
        exposed = f"upstream_{exposed}"
        if exposed in taken.prompts or exposed in view.prompt_routes:
            reason = f"collides with {exposed!r} after renaming"
            view.dropped.append({"kind": "prompt", "name": original, "reason": reason})
            return
    if exposed != original:
        view.renamed.append({"kind": "prompt", "name": original, "exposed_as": exposed})
        prompt = prompt.model_copy(update={"name": exposed})
    view.prompts.append(prompt)
    view.prompt_routes[exposed] = RelayedPrompt(exposed, original, index)


def counts(view: SurfaceView) -> dict[str, Any]:
    return {
        "relayed_resources": len(view.resources),
        "relayed_resource_templates": len(view.templates),
        "relayed_prompts": len(view.prompts),
    }
