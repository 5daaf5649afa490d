"""The MCP server: the low-level SDK ``Server`` whose handlers reach the runtime one way only.

That way is the server lifespan: :func:`build_server` gives the ``Server`` a lifespan that yields the
(already entered) :class:`~gateway._runtime.Runtime`, and every handler reads it as the typed
``ctx.lifespan_context``. The low-level server does no input or output validation, so relayed tools pass
through byte-for-byte while own tools are validated by the dispatcher.

``instructions`` describe what the tools will actually use (targets, upstreams and their tool counts), which
changes while the gateway runs. The SDK (2.3) takes them from the fixed ``Server.instructions`` attribute
when it builds the ``initialize`` and ``server/discover`` results, and offers no per-request hook for them;
the public seam it documents for wrapping initialization is ``Server.middleware`` (provisional in 2.3), so a
middleware fills them in from ``ctx.lifespan_context`` on those two results.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway._dispatch import dispatch_call
from gateway._runtime import Runtime
from gateway.auth.policy import Policy, Principal
from gateway.mcptasks import install, may_run_as_task, server_tasks_capability
from gateway.secrets.broker import UrlElicitor
from gateway.serving.surface import register_surface
from gateway.serving.tasks import task_hooks
from upstream import ElicitCallback

__all__ = ["GatewayServer", "build_server"]

_log = structlog.get_logger("gateway.server")
_NOTIFY_TIMEOUT_S = 5.0
_DESCRIBED = frozenset({"initialize", "server/discover"})
_INPUT_REQUIRED_VERSION = "2026-07-28"  # ISO dates compare as strings

Ctx = ServerRequestContext[Runtime, Any]


class GatewayServer(Server[Runtime]):
    """The SDK's low-level ``Server`` with the gateway's handlers; state only what MCP needs per client."""

    def __init__(
        self,
        name: str,
        *,
        version: str,
        lifespan: Callable[[Server[Runtime]], AbstractAsyncContextManager[Runtime]],
        stdio_principal: str | None = None,
        policy: Policy | None = None,
    ) -> None:
        super().__init__(
            name,
            version=version,
            lifespan=lifespan,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
        )
        self.middleware.append(self._instructions_from_runtime)
        self._fallback = (
            Principal.operator("stdio", stdio_principal)
            if stdio_principal
            else Principal.operator("anonymous", "anonymous")
        )
        self.policy = policy or Policy.unrestricted()
        # Clients to tell about tools/list_changed. In SDK 2.3 ``ctx.session`` is built per request
        # (``ServerRunner._make_context``), so it cannot stand for a client; the per-client object is the
        # ``Connection`` (a public type with a public ``send_tool_list_changed``), but the handler context
        # offers no public path to it: ``ServerRequestContext`` has none, and the ``Context`` type that has
        # ``.connection`` is not constructed by ``ServerRunner`` in 2.3. It is read from the session's
        # private field in ``_remember``, the one such read; weak, so closed clients drop out.
        self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self.tasks_enabled = False

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """Advertise ``tools.listChanged``: relayed tool lists change and are forwarded."""
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        """Handshake era: the 2025-11-25 ``tasks`` capability beside the rest (older versions drop it, the
        2026-07-28 answer carries the extension instead), when MCP tasks are installed."""
        caps = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if self.tasks_enabled and protocol_version not in MODERN_PROTOCOL_VERSIONS:
            caps = caps.model_copy(update={"tasks": server_tasks_capability()})
        return caps

    def _remember(self, ctx: Ctx) -> None:
        self._connections.add(ctx.session._connection)  # no public path in SDK 2.3: see __init__

    def _principal(self) -> Principal:
        return self.policy.principal(get_access_token(), self._fallback)

    async def _instructions_from_runtime(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Server middleware: ``initialize`` and ``server/discover`` answers carry the runtime's
        instructions, narrowed to the toolsets and targets this caller's policy reaches."""
        result = await call_next(ctx)
        if ctx.method in _DESCRIBED and isinstance(result, dict):
            who = self._principal()
            text = ctx.lifespan_context.describe(
                toolsets=self.policy.toolsets(who), targets=self.policy.targets(who)
            )
            return {**result, "instructions": text}
        return result

    async def _on_list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._remember(ctx)
        rt, who = ctx.lifespan_context, self._principal()
        allowed = self.policy.allows_toolset
        own = [spec.to_mcp() for spec in rt.catalog.enabled.values() if allowed(who, spec.toolset)]
        if self.tasks_enabled and _lists_task_support(ctx):
            optional = types.ToolExecution(task_support="optional")
            own = [
                t.model_copy(update={"execution": optional})
                if may_run_as_task(rt.settings.mcp_tasks, t.name)
                else t
                for t in own
            ]
        relayed = await rt.relay.list_tools() if self.policy.allows_toolset(who, "upstream") else []
        return types.ListToolsResult(tools=own + relayed)

    async def _on_call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._remember(ctx)
        session = ctx.session

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await session.report_progress(progress, total, message)

        return await dispatch_call(
            ctx.lifespan_context,
            params,
            principal=self._principal(),
            policy=self.policy,
            report_progress=progress,
            elicit=_elicit_via(ctx),
            elicitor=_url_elicitor(ctx),
            input_required=_input_required(ctx),
        )

    async def notify_tools_changed(self) -> None:
        """Send ``notifications/tools/list_changed`` to every client that has talked to this server."""
        for connection in list(self._connections):
            try:
                with anyio.fail_after(_NOTIFY_TIMEOUT_S):  # a stuck client must not hold up the others
                    await connection.send_tool_list_changed()
            except Exception as exc:  # a closed client must not stop the others from hearing it
                _log.debug("list_changed_not_delivered", error=type(exc).__name__)


def _lists_task_support(ctx: Ctx) -> bool:
    """2025-11-25 only, and only to a client that declared the ``tasks`` capability: every other client
    sees the tool list unchanged (2026-07-28 has no ``execution`` member: the server decides there)."""
    declared = ctx.session.client_capabilities
    return ctx.protocol_version == "2025-11-25" and declared is not None and declared.tasks is not None


def _elicit_via(ctx: Ctx) -> ElicitCallback | None:
    """Forward an upstream's elicitation to the calling client on this call's own stream, or None
    when it cannot be asked: no elicitation capability declared, or no back-channel (the stateless
    2026-07-28 era, stateless or JSON-response HTTP)."""
    session, request_id = ctx.session, ctx.request_id
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if request_id is None or not session.can_send_request or not session.check_client_capability(wanted):
        return None
    declared = session.client_capabilities
    declared_url = (
        declared is not None and declared.elicitation is not None and declared.elicitation.url is not None
    )

    async def elicit(params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        if isinstance(params, types.ElicitRequestURLParams) and not declared_url:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="the calling client cannot answer URL-mode elicitation"
            )
        try:  # params pass through unchanged; related_request_id keeps it on the call's stream
            return await session.send_request(
                types.ElicitRequest(params=params),
                types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=request_id),
            )
        except MCPError as exc:  # the client's refusal (or no back-channel after all) goes back as is
            return exc.error

    return elicit


def _url_elicitor(ctx: Ctx) -> UrlElicitor | None:
    """URL-mode elicitation of the calling client on this call's stream, or None when the client did not
    declare URL mode or the call has no back-channel (2026-07-28, stateless HTTP): then the password page's
    link travels in the ``privilege_error`` instead."""
    session, request_id = ctx.session, ctx.request_id
    wanted = types.ClientCapabilities(
        elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability())
    )
    if request_id is None or not session.can_send_request or not session.check_client_capability(wanted):
        return None
    declared = session.client_capabilities
    if declared is None or declared.elicitation is None or declared.elicitation.url is None:
        return None

    async def ask(message: str, url: str, elicitation_id: str) -> types.ElicitResult | types.ErrorData:
        try:
            return await session.elicit_url(message, url, elicitation_id, related_request_id=request_id)
        except MCPError as exc:
            return exc.error

    async def complete(elicitation_id: str) -> None:
        await session.send_elicit_complete(elicitation_id, related_request_id=request_id)

    return UrlElicitor(ask=ask, complete=complete)


def _input_required(ctx: Ctx) -> bool:
    """A 2026-07-28 request (no server-to-client requests) from a client that declared URL elicitation:
    the password page's link can travel as an ``InputRequiredResult``."""
    if ctx.protocol_version < _INPUT_REQUIRED_VERSION or ctx.session.can_send_request:
        return False
    declared = ctx.session.client_capabilities
    return declared is not None and declared.elicitation is not None and declared.elicitation.url is not None


def build_server(rt: Runtime, *, stdio_principal: str | None = None) -> GatewayServer:
    """A server on an entered runtime: its lifespan yields ``rt`` (the caller enters and exits it around
    the whole serving loop, so HTTP sessions and stdio share one runtime)."""

    @asynccontextmanager
    async def lifespan(_: Server[Runtime]) -> AsyncIterator[Runtime]:
        yield rt

    server = GatewayServer(
        rt.settings.server.name,
        version=rt.identity.version,
        lifespan=lifespan,
        stdio_principal=stdio_principal,
        policy=Policy.from_settings(rt.settings.auth),
    )
    rt.relay.add_listener(server.notify_tools_changed)
    if rt.settings.mcp_tasks.enabled:  # tasks/* methods, the tools/call middleware, the capability
        install(server, task_hooks(rt, server._principal, lambda: server.policy))
        server.tasks_enabled = True
    register_surface(  # resources, prompts: _server_surface; gated by the same policy as tools
        server,
        rt,
        lambda: server._principal().label,
        lambda: server.policy.allows_toolset(server._principal(), "upstream"),
    )
    return server
