"""The MCP server: the low-level SDK ``Server`` wired to the runtime.

The low-level server does no input or output validation, so relayed tools pass through byte-for-byte
while own tools are validated by the dispatcher. ``instructions`` are computed per initialize from the
runtime, so they always describe what the tools will actually use.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from gateway._dispatch import dispatch_call
from gateway._runtime import Runtime
from gateway._server_surface import register_surface
from upstream import ElicitCallback

__all__ = ["GatewayServer", "build_server"]

_log = structlog.get_logger("gateway.server")
_NOTIFY_TIMEOUT_S = 5.0


class GatewayServer(Server[Runtime]):
    """``Server`` whose instructions and capabilities come from the live runtime."""

    runtime: Runtime

    @property
    def instructions(self) -> str:
        return self.runtime.describe()

    @instructions.setter
    def instructions(self, value: str | None) -> None:  # the SDK assigns it once; the runtime is the source
        return None

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _elicit_via(ctx: ServerRequestContext[Runtime]) -> ElicitCallback | None:
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


def build_server(rt: Runtime, *, stdio_principal: str | None = None) -> GatewayServer:
    # Clients to tell about tools/list_changed. In SDK 2.3 ``ctx.session`` is built per request
    # (``ServerRunner._make_context``), so a weak set of sessions empties as each request ends; the
    # per-client object is the session's ``Connection`` (public type, reached only via a private field).
    connections: weakref.WeakSet[Connection] = weakref.WeakSet()

    def remember(session: ServerSession) -> None:
        connections.add(session._connection)

    def principal() -> str:
        token = get_access_token()
        if token is not None:
            return f"bearer:{token.client_id}"
        return stdio_principal or "anonymous"

    async def on_list_tools(
        ctx: ServerRequestContext[Runtime], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        remember(ctx.session)
        return types.ListToolsResult(tools=rt.catalog.tools() + await rt.relay.list_tools())

    async def on_call_tool(
        ctx: ServerRequestContext[Runtime], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        remember(ctx.session)
        session = ctx.session

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await session.report_progress(progress, total, message)

        return await dispatch_call(
            rt, params, principal=principal(), report_progress=progress, elicit=_elicit_via(ctx)
        )

    async def tools_changed() -> None:
        for connection in list(connections):
            try:
                with anyio.fail_after(_NOTIFY_TIMEOUT_S):  # a stuck client must not hold up the others
                    await connection.outbound.notify("notifications/tools/list_changed", None)
            except Exception as exc:  # a closed client must not stop the others from hearing it
                _log.debug("list_changed_not_delivered", error=type(exc).__name__)

    rt.relay.add_listener(tools_changed)

    @asynccontextmanager
    async def lifespan(_: Server[Runtime]) -> AsyncIterator[Runtime]:
        yield rt  # the runtime is entered (and exited) by the caller, around the whole serving loop

    server = GatewayServer(
        rt.settings.server.name,
        version=rt.identity.version,
        lifespan=lifespan,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    server.runtime = rt
    register_surface(server, rt, principal)  # resources, prompts, completions: gateway._server_surface
    return server
