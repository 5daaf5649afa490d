"""The MCP handlers for relayed resources, resource templates, prompts, completions and subscriptions.

:func:`register_surface` adds them to the gateway's ``Server``; each reaches the runtime only through
``ctx.lifespan_context``. Capabilities are derived per ``initialize`` / ``server/discover`` from what the
upstreams declared (a server middleware rewrites the SDK's derivation, which would advertise every
registered method): ``resources`` (with ``subscribe`` when some upstream can), ``prompts`` and
``completions`` appear only when some relayed upstream has them.

Notifications: an upstream's ``resources/list_changed`` / ``prompts/list_changed`` reach every client
that has used these methods; ``resources/updated`` reaches the clients subscribed to that URI. One
upstream subscription serves every client subscribed to a URI; the last unsubscribe ends it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import anyio
import mcp_types as types
import structlog
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from gateway.relay import surface_dispatch as dispatch
from upstream import SurfaceNotice, Upstream

if TYPE_CHECKING:
    from gateway._runtime import Runtime

__all__ = ["SurfaceHandlers", "register_surface"]

_log = structlog.get_logger("gateway.server")
_NOTIFY_TIMEOUT_S: Final = 5.0
_DESCRIBED: Final = frozenset({"initialize", "server/discover"})

Ctx = ServerRequestContext["Runtime", Any]


class _Clients:
    """Clients that used these methods (for list_changed), and who subscribed to which URI."""

    def __init__(self) -> None:
        self.seen: weakref.WeakSet[Connection] = weakref.WeakSet()
        self.subscribers: dict[str, weakref.WeakSet[Connection]] = {}
        self.upstream_of: dict[str, Upstream] = {}

    def remember(self, ctx: Ctx) -> Connection:
        # No public path from a handler to its Connection in SDK 2.3 (see gateway.serving.server).
        connection: Connection = ctx.session._connection
        self.seen.add(connection)
        return connection

    async def _send(self, connection: Connection, send: Callable[[Connection], Any]) -> None:
        try:
            with anyio.fail_after(_NOTIFY_TIMEOUT_S):  # a stuck client must not hold up the others
                await send(connection)
        except Exception as exc:  # a closed client must not stop the others from hearing it
            _log.debug("surface_notice_not_delivered", error=type(exc).__name__)

    async def forward(self, notice: SurfaceNotice) -> None:
        changed = notice.lists_changed
        for connection in list(self.seen):
            if "resources" in changed or "resource_templates" in changed:
                await self._send(connection, lambda c: c.send_resource_list_changed())
            if "prompts" in changed:
                await self._send(connection, lambda c: c.send_prompt_list_changed())
        for uri in sorted(notice.updated):
            for connection in list(self.subscribers.get(uri, ())):
                await self._send(connection, partial(_send_updated, uri=uri))


async def _send_updated(connection: Connection, *, uri: str) -> None:
    await connection.send_resource_updated(uri)


def _patch_capabilities(result: dict[str, Any], wanted: dict[str, Any], *, legacy: bool) -> dict[str, Any]:
    capabilities = dict(result.get("capabilities") or {})
    if wanted["resources"]:
        resources = dict(capabilities.get("resources") or {})
        resources["subscribe"] = bool(wanted["subscribe"]) and bool(resources.get("subscribe", True))
        if legacy:
            resources["listChanged"] = True  # forwarded from the upstreams
        capabilities["resources"] = resources
    else:
        capabilities.pop("resources", None)
    if wanted["prompts"]:
        prompts = dict(capabilities.get("prompts") or {})
        if legacy:
            prompts["listChanged"] = True
        capabilities["prompts"] = prompts
    else:
        capabilities.pop("prompts", None)
    if not wanted["completions"]:
        capabilities.pop("completions", None)
    return {**result, "capabilities": capabilities}


async def _capabilities_from_upstreams(ctx: Ctx, call_next: CallNext) -> HandlerResult:
    """Server middleware: advertise resources/prompts/completions only when some upstream has them."""
    result = await call_next(ctx)
    if ctx.method in _DESCRIBED and isinstance(result, dict):
        wanted = await ctx.lifespan_context.relay.surface.capabilities()
        return _patch_capabilities(result, wanted, legacy=ctx.method == "initialize")
    return result


async def _served(ctx: Ctx) -> None:
    """Answer ``-32601`` for a method no relayed upstream serves (its capability is not advertised)."""
    if not await ctx.lifespan_context.relay.surface.method_served(ctx.method):
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found")


class SurfaceHandlers:
    """The handlers, one method each (as ``GatewayServer``'s own); the runtime comes from the context."""

    def __init__(self, principal: Callable[[], str], allowed: Callable[[], bool]) -> None:
        self._principal = principal
        self._allowed = allowed  # the one policy: may this caller reach the upstream toolset?
        self.clients = _Clients()

    async def _enter(self, ctx: Ctx, *, listing: bool = False) -> Connection | None:
        """The caller's connection, or None for a list the policy hides; a read, get, completion or
        subscription outside the caller's scopes is refused like a filtered name (``-32602``)."""
        connection = self.clients.remember(ctx)
        await _served(ctx)
        if not self._allowed():
            if listing:
                return None
            raise MCPError(types.INVALID_PARAMS, "not available to this caller (upstream toolset)")
        return connection

    async def on_list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams
    ) -> types.ListResourcesResult:
        if await self._enter(ctx, listing=True) is None:
            return types.ListResourcesResult(resources=[])
        return types.ListResourcesResult(resources=await ctx.lifespan_context.relay.surface.list_resources())

    async def on_list_resource_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams
    ) -> types.ListResourceTemplatesResult:
        if await self._enter(ctx, listing=True) is None:
            return types.ListResourceTemplatesResult(resource_templates=[])
        templates = await ctx.lifespan_context.relay.surface.list_resource_templates()
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def on_read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        await self._enter(ctx)
        return await dispatch.read_resource(ctx.lifespan_context, params, principal=self._principal())

    async def on_list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams
    ) -> types.ListPromptsResult:
        if await self._enter(ctx, listing=True) is None:
            return types.ListPromptsResult(prompts=[])
        return types.ListPromptsResult(prompts=await ctx.lifespan_context.relay.surface.list_prompts())

    async def on_get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        await self._enter(ctx)
        return await dispatch.get_prompt(ctx.lifespan_context, params, principal=self._principal())

    async def on_completion(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        await self._enter(ctx)
        return await dispatch.complete(ctx.lifespan_context, params)

    async def on_subscribe_resource(
        self, ctx: Ctx, params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        connection = await self._enter(ctx)
        assert connection is not None  # only lists are hidden; everything else raised  # noqa: S101
        clients, uri = self.clients, params.uri
        subscribed = clients.subscribers.setdefault(uri, weakref.WeakSet())
        if uri not in clients.upstream_of or not subscribed:  # the first subscriber subscribes upstream
            clients.upstream_of[uri] = await dispatch.subscribe(ctx.lifespan_context, uri)
        subscribed.add(connection)
        return types.EmptyResult()

    async def on_unsubscribe_resource(
        self, ctx: Ctx, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        connection = await self._enter(ctx)
        assert connection is not None  # only lists are hidden; everything else raised  # noqa: S101
        clients, uri = self.clients, params.uri
        subscribed = clients.subscribers.get(uri)
        if subscribed is not None:
            subscribed.discard(connection)
            if not subscribed:  # the last subscriber ends the upstream subscription
                del clients.subscribers[uri]
                up = clients.upstream_of.pop(uri, None)
                if up is not None:
                    await dispatch.unsubscribe(ctx.lifespan_context, up, uri)
        return types.EmptyResult()


def register_surface(
    server: Server[Runtime], rt: Runtime, principal: Callable[[], str], allowed: Callable[[], bool]
) -> None:
    """Add the handlers and the capability middleware to ``server``; forward ``rt``'s upstream notices.
    ``allowed`` is the policy's answer for the calling principal and the ``upstream`` toolset."""
    handlers = SurfaceHandlers(principal, allowed)
    add = server.add_request_handler
    add("resources/list", types.PaginatedRequestParams, handlers.on_list_resources)
    add("resources/templates/list", types.PaginatedRequestParams, handlers.on_list_resource_templates)
    add("resources/read", types.ReadResourceRequestParams, handlers.on_read_resource)
    add("resources/subscribe", types.SubscribeRequestParams, handlers.on_subscribe_resource)
    add("resources/unsubscribe", types.UnsubscribeRequestParams, handlers.on_unsubscribe_resource)
    add("prompts/list", types.PaginatedRequestParams, handlers.on_list_prompts)
    add("prompts/get", types.GetPromptRequestParams, handlers.on_get_prompt)
    add("completion/complete", types.CompleteRequestParams, handlers.on_completion)
    server.middleware.append(_capabilities_from_upstreams)
    rt.relay.surface.add_listener(handlers.clients.forward)
