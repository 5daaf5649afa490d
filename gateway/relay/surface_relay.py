"""`SurfaceRelay`: the relayed resources, resource templates, prompts and completions of every upstream.

Part of the :class:`~gateway.relay.tools.Relay` (``relay.surface``), over the same ``Upstream`` objects. Views
are rebuilt from each upstream's lists (cached per connection by ``upstream``) on every list and on
every routing miss, in configuration order, so collisions are decided the same way every time; see
``gateway.relay.surface`` for the gating rules. Listing never waits for an upstream that is down (the last
lists known are served); routing a read or a prompt to an upstream whose lists were never learnt is
``upstream_unavailable``, decided by the caller (:meth:`SurfaceRelay.never_listed`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import mcp_types as types

from gateway.config import UpstreamEntry
from gateway.relay.surface import RelayedPrompt, SurfaceView, Taken, build_surface_view, counts
from upstream import SurfaceNotice, Upstream

__all__ = ["NoticeListener", "SurfaceRelay"]

NoticeListener = Callable[[SurfaceNotice], Awaitable[None]]


class SurfaceRelay:
    def __init__(
        self,
        entries: Sequence[UpstreamEntry],
        upstreams: Sequence[Upstream],
        *,
        enabled: bool,
        first_connections: Callable[[], Awaitable[None]],
    ) -> None:
        self._entries = tuple(entries)
        self._upstreams = tuple(upstreams)
        self._enabled = enabled
        self._first_connections = first_connections
        self._views = [SurfaceView() for _ in self._entries]
        self._listeners: list[NoticeListener] = []

    # ----------------------------------------------------------------- capabilities

    def _any(self, test: Callable[[Upstream], bool]) -> bool:
        return self._enabled and any(test(up) for up in self._upstreams)

    def serves_resources(self) -> bool:
        return self._any(lambda up: up.surface.supports("resources"))

    def serves_prompts(self) -> bool:
        return self._any(lambda up: up.surface.supports("prompts"))

    def serves_subscriptions(self) -> bool:
        return self._any(lambda up: up.surface.can_subscribe)

    def serves_completions(self) -> bool:
        return self._any(lambda up: up.surface.can_complete)

    async def capabilities(self) -> dict[str, Any]:
        """What to advertise: only what some (relayed) upstream declared on its last connect. Waits,
        bounded by ``first_list_wait_s``, for upstreams still making their first connection."""
        if self._enabled:
            await self._first_connections()
        return {
            "resources": self.serves_resources(),
            "subscribe": self.serves_subscriptions(),
            "prompts": self.serves_prompts(),
            "completions": self.serves_completions(),
        }

    # ----------------------------------------------------------------- views

    async def _learn(self) -> None:
        """Routing missed: wait (each bounded by its ``call_wait_s``) for upstreams never connected yet."""
        pending = [up for up in self._upstreams if up.surface.capabilities is None]
        if pending:
            async with anyio.create_task_group() as tg:
                for up in pending:
                    tg.start_soon(up.surface.learn)
        await self._refresh()

    async def _refresh(self) -> None:
        taken = Taken()
        for index, up in enumerate(self._upstreams):
            surface = up.surface
            resources = await surface.list_resources()
            templates = await surface.list_resource_templates()
            prompts = await surface.list_prompts()
            if resources is None and templates is None and prompts is None:
                view = SurfaceView()  # never connected: contributes nothing yet
            else:
                view = build_surface_view(
                    self._entries[index],
                    index,
                    resources=resources or (),
                    templates=templates or (),
                    prompts=prompts or (),
                    taken=taken,
                )
            view.claim(taken, up.name)
            self._views[index] = view

    async def lists(self) -> list[SurfaceView]:
        """Fresh views of every upstream (the first list waits for first connections, bounded)."""
        if not self._enabled:
            return []
        await self._first_connections()
        await self._refresh()
        return list(self._views)

    async def list_resources(self) -> list[types.Resource]:
        return [resource for view in await self.lists() for resource in view.resources]

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        return [template for view in await self.lists() for template in view.templates]

    async def list_prompts(self) -> list[types.Prompt]:
        return [prompt for view in await self.lists() for prompt in view.prompts]

    def never_listed(self) -> list[str]:
        """Enabled upstreams never connected since start: what they serve is not known yet."""
        if not self._enabled:
            return []
        return [up.name for up in self._upstreams if up.surface.capabilities is None]

    async def method_served(self, method: str) -> bool:
        """Whether ``method`` is served: some relayed upstream has its capability, or one never reached
        yet might (then the caller answers as for an unreachable upstream). Waits for first connections."""
        if not self._enabled or not self._upstreams:
            return False
        await self._first_connections()
        if self.never_listed():
            return True
        if method.startswith("prompts/"):
            return self.serves_prompts()
        if method in ("resources/subscribe", "resources/unsubscribe"):
            return self.serves_subscriptions()
        if method == "completion/complete":
            return self.serves_completions()
        return self.serves_resources()

    # ----------------------------------------------------------------- routing

    def _route_uri(self, uri: str) -> int | None:
        for index, view in enumerate(self._views):
            if view.serves_uri(uri):
                return index
        for index, view in enumerate(self._views):
            if not view.refuses(uri) and view.template_serves(uri):
                return index
        return None

    async def route_uri(self, uri: str) -> Upstream | None:
        """The upstream that serves ``uri`` after gating, or None (unknown or filtered)."""
        if not self._enabled:
            return None
        index = self._route_uri(uri)
        if index is None:
            await self._learn()
            index = self._route_uri(uri)
        return None if index is None else self._upstreams[index]

    async def route_template(self, template: str) -> Upstream | None:
        """The upstream serving exactly this URI template (for completions), or None."""
        if not self._enabled:
            return None
        for _ in range(2):
            for index, view in enumerate(self._views):
                if any(served.uri_template == template for served in view.templates):
                    return self._upstreams[index]
            await self._learn()
        return None

    async def resolve_prompt(self, name: str) -> tuple[Upstream, RelayedPrompt] | None:
        if not self._enabled:
            return None
        for _ in range(2):
            for view in self._views:
                route = view.prompt_routes.get(name)
                if route is not None:
                    return self._upstreams[route.upstream_index], route
            await self._learn()
        return None

    # ----------------------------------------------------------------- notifications

    def add_listener(self, listener: NoticeListener) -> None:
        """Called with every upstream notice that passes the gating (the server forwards it)."""
        self._listeners.append(listener)

    async def on_notice(self, index: int, notice: SurfaceNotice) -> None:
        """An upstream's notice: gated (a filtered URI's update is not forwarded, as its existence is
        not disclosed either), then handed to the listeners."""
        if not self._enabled:
            return
        view = self._views[index]
        updated = frozenset(uri for uri in notice.updated if not view.refuses(uri))
        gated = SurfaceNotice(notice.lists_changed, updated)
        if not gated.lists_changed and not gated.updated:
            return
        for listener in list(self._listeners):
            await listener(gated)

    # ----------------------------------------------------------------- health

    def health(self, index: int) -> dict[str, Any]:
        view = self._views[index]
        up = self._upstreams[index]
        return {
            **counts(view),
            "capabilities": {
                "resources": up.surface.supports("resources"),
                "subscribe": up.surface.can_subscribe,
                "prompts": up.surface.supports("prompts"),
                "completions": up.surface.can_complete,
            },
            "surface_dropped": view.dropped,
            "surface_renamed": view.renamed,
        }
