"""`UpstreamSurface`: an upstream's resources, resource templates, prompts and completions.

Reached as `Upstream.surface`. Reads, prompt gets, completions and (un)subscriptions go through
the same `Relay` as `Upstream.call_tool` (`upstream._relay`), so they share the relayed tools' fault
semantics exactly: nothing sent → retried on the next connection (bounded), a definitive "session
not found" → retried once, a connection lost after sending → `UpstreamAmbiguous`, never re-sent.
Listing never raises and never waits for an upstream that is down: it answers from the cache,
fetches (bounded by `list_timeout_s`) on a live connection, and otherwise returns the last list
known (`None`: never known).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from upstream._calls import Outcome, classify, leg_meta
from upstream._connection import Abandoned
from upstream._errors import UpstreamClosed
from upstream._relay import Relay
from upstream._settings import UpstreamSettings
from upstream._supervisor import Supervisor
from upstream._surface import SurfaceKind, list_all, supports

__all__ = ["UpstreamSurface"]


class UpstreamSurface:
    """Everything of one upstream that is not a tool."""

    def __init__(self, settings: UpstreamSettings, sup: Supervisor, relay: Relay) -> None:
        self._settings = settings
        self._sup = sup
        self._relay = relay

    @property
    def capabilities(self) -> types.ServerCapabilities | None:
        """What the upstream declared on its last successful connect (None: never connected)."""
        return self._sup.capabilities

    def supports(self, kind: SurfaceKind) -> bool:
        return supports(self.capabilities, kind)

    @property
    def can_subscribe(self) -> bool:
        resources = self.capabilities.resources if self.capabilities is not None else None
        return resources is not None and resources.subscribe is True

    @property
    def can_complete(self) -> bool:
        return self.capabilities is not None and self.capabilities.completions is not None

    async def learn(self) -> None:
        """If the upstream has never connected, wait (bounded by `call_wait_s`) for its first working
        connection, so its capabilities and lists are known. Never raises for an unreachable upstream."""
        if self.capabilities is not None:
            return
        with anyio.move_on_after(self._settings.call_wait_s):
            try:
                await self._sup.wait_connection()
            except UpstreamClosed:
                return

    # ----------------------------------------------------------------- lists

    async def list(self, kind: SurfaceKind) -> tuple[Any, ...] | None:
        """All pages of one list, items unchanged; `()` when the upstream does not serve `kind`."""
        sup = self._sup
        if sup.capabilities is None:
            return None
        if not supports(sup.capabilities, kind):
            return ()
        conn = sup.conn
        if conn is None or conn.lost.is_set():
            return sup.surface.last_known(kind)
        cached = sup.surface.fresh(kind, conn.tag)
        if cached is not None:
            return cached
        limit = self._settings.list_timeout_s
        items: tuple[Any, ...] | None = None
        try:
            with anyio.move_on_after(limit):
                items = await conn.request(partial(list_all, conn.session(), kind))
        except Abandoned:
            pass
        except MCPError as exc:
            outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
            sup.stats.record_error(error_class)
            if outcome is not Outcome.REJECTED:
                conn.mark_lost(error_class)
        except ValidationError as exc:
            sup.stats.record_error(type(exc).__name__, f"invalid answer to a {kind} list")
        if items is None:
            return sup.surface.last_known(kind)
        sup.surface.store(kind, conn.tag, items)
        return items

    async def list_resources(self) -> tuple[types.Resource, ...] | None:
        return cast("tuple[types.Resource, ...] | None", await self.list("resources"))

    async def list_resource_templates(self) -> tuple[types.ResourceTemplate, ...] | None:
        return cast("tuple[types.ResourceTemplate, ...] | None", await self.list("resource_templates"))

    async def list_prompts(self) -> tuple[types.Prompt, ...] | None:
        return cast("tuple[types.Prompt, ...] | None", await self.list("prompts"))

    # ----------------------------------------------------------------- requests

    async def read_resource(
        self, uri: str, *, meta: Mapping[str, Any] | None = None
    ) -> types.ReadResourceResult:
        """Relay one resources/read; the result comes back unchanged."""
        params = types.ReadResourceRequestParams.model_validate(
            {"uri": uri, **({"_meta": m} if (m := leg_meta(meta)) else {})}, by_alias=True
        )
        request = types.ReadResourceRequest(params=params)
        return await self._relay(request, types.ReadResourceResult, subject=uri)

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> types.GetPromptResult:
        """Relay one prompts/get; the result comes back unchanged."""
        wire: dict[str, Any] = {"name": name}
        if arguments is not None:
            wire["arguments"] = dict(arguments)
        if m := leg_meta(meta):
            wire["_meta"] = m
        params = types.GetPromptRequestParams.model_validate(wire, by_alias=True)
        request = types.GetPromptRequest(params=params)
        return await self._relay(request, types.GetPromptResult, subject=name)

    async def complete(self, params: types.CompleteRequestParams) -> types.CompleteResult:
        """Relay one completion/complete (the caller has already named the upstream's own ref)."""
        params = params.model_copy(update={"meta": leg_meta(params.meta)})
        subject = getattr(params.ref, "name", None) or getattr(params.ref, "uri", "") or "completion"
        request = types.CompleteRequest(params=params)
        limit = self._settings.list_timeout_s
        return await self._relay(request, types.CompleteResult, subject=str(subject), limit_s=limit)

    async def subscribe(self, uri: str) -> None:
        """Subscribe to `uri` upstream; it is subscribed again on every later connection."""
        request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
        limit = self._settings.list_timeout_s
        await self._relay(request, types.EmptyResult, subject=uri, limit_s=limit)
        self._sup.subscriptions.add(uri)

    async def unsubscribe(self, uri: str) -> None:
        self._sup.subscriptions.discard(uri)
        request = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
        limit = self._settings.list_timeout_s
        await self._relay(request, types.EmptyResult, subject=uri, limit_s=limit)
