"""Step-up authorization over HTTP (``auth.mode = "oauth"``): a call outside the token's scopes → 403.

The MCP authorization spec's answer to "valid token, not enough scope" is HTTP 403 with
``WWW-Authenticate: Bearer error="insufficient_scope", scope="…", resource_metadata="…"``, so that a
client can ask its authorization server for a token with the scopes named there and retry the call.
:class:`ScopeChallenge` sits on the MCP route behind the SDK's bearer authentication (it sees the
verified token) and looks at each POSTed JSON-RPC ``tools/call``: when the named tool exists and its
toolset is one the caller's scopes do not open, the one :class:`~gateway.auth.policy.Policy` says which
scopes would (:meth:`~gateway.auth.policy.Policy.scope_challenge`) and the request is answered with that 403
without reaching the MCP session. The body is a JSON-RPC error for the request's id (code -32600, ``data``
``{"error": "insufficient_scope", "scope": …, "code": "policy_denied"}``), which SDK clients surface as the
call's error when they do not step up. It is audited (``error_code`` ``policy_denied``, ``facts.http_status``
403 and the challenged scopes) and logged with the principal like any denied call.

Everything else passes through untouched and is decided by the dispatcher with the same policy:
``tools/list`` simply hides such tools; a call naming a target the caller's grants exclude, inside scopes
it holds, is a ``policy_denied`` tool result (more scope would not help); proxied and operator callers,
who have no token to step up, get ``policy_denied`` too; unknown tool names get the usual JSON-RPC error.

The body is read at most up to the transport's own cap (a bigger one passes through and gets the
transport's 413) and replayed to the app message by message, unchanged.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway._errors import ErrorCode
from gateway._runtime import Runtime
from gateway.auth.policy import Policy, Principal

__all__ = ["ScopeChallenge", "challenge_header"]

_log = structlog.get_logger("gateway.http")
_NOBODY = Principal.operator("anonymous", "anonymous")  # unused: only requests with a token are looked at


def challenge_header(scopes: tuple[str, ...], resource_metadata_url: str, description: str) -> str:
    """RFC 6750 §3 challenge for ``insufficient_scope`` (values are quoted; scope names have no quotes:
    RFC 6749 scope tokens exclude ``"`` and ``\\``, and the description is ours)."""
    return (
        f'Bearer error="insufficient_scope", scope="{" ".join(scopes)}", '
        f'resource_metadata="{resource_metadata_url}", error_description="{description}"'
    )


class ScopeChallenge:
    """ASGI wrapper of the MCP endpoint: 403 ``insufficient_scope`` for calls a broader token would reach."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        runtime: Runtime,
        policy: Policy,
        resource_metadata_url: str,
        max_body_bytes: int,
    ) -> None:
        self._app = app
        self._rt = runtime
        self._policy = policy
        self._metadata_url = resource_metadata_url
        self._cap = max_body_bytes
        self.challenged = 0
        """Calls answered with 403 so far."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if scope["type"] != "http" or scope["method"] != "POST" or not isinstance(user, AuthenticatedUser):
            await self._app(scope, receive, send)  # no token: the SDK's RequireAuthMiddleware answers 401
            return
        who = self._policy.principal(user.access_token, _NOBODY)
        if who.kind != "oauth" or self._policy.toolsets(who) is None:
            await self._app(scope, receive, send)
            return
        messages, body = await self._read(scope, receive)
        pending = deque(messages)

        async def replay() -> Message:
            return pending.popleft() if pending else await receive()

        call = _tool_call(body) if body is not None else None
        if call is not None:
            toolset = await self._toolset(who, call.name)
            wanted = self._policy.scope_challenge(who, toolset) if toolset is not None else None
            if wanted is not None and toolset is not None:
                await self._refuse(send, who, call, toolset, wanted)
                return
        await self._app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Receive) -> tuple[list[Message], bytes | None]:
        """The request's messages as received, and the body when it is complete and within the cap."""
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self._cap):
            return [], None  # the transport refuses it (413 / 400); nothing to look at
        messages: list[Message] = []
        body = bytearray()
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages, None  # the client went away
            body += message.get("body", b"")
            if len(body) > self._cap:
                return messages, None
            if not message.get("more_body", False):
                return messages, bytes(body)

    async def _toolset(self, who: Principal, name: str) -> str | None:
        own = self._rt.catalog.get(name)
        if own is not None:
            return own.toolset.value
        if self._policy.allows_toolset(who, "upstream"):
            return None  # a relayed tool (or an unknown name) the caller reaches: the dispatcher decides
        return "upstream" if await self._rt.relay.resolve(name) is not None else None

    async def _refuse(
        self,
        send: Send,
        who: Principal,
        call: _Call,
        toolset: str,
        wanted: tuple[str, ...],
    ) -> None:
        self.challenged += 1
        name, arguments = call.name, call.arguments
        target = arguments.get("target") if isinstance(arguments.get("target"), str) else None
        _log.warning("insufficient_scope", principal=who.label, tool=name, toolset=toolset, scope=wanted)
        self._rt.audit.tool_call(
            request_id=uuid.uuid4().hex[:16],
            principal=who.label,
            tool=name,
            toolset=toolset,
            target=target,
            outcome="error",
            error_code=ErrorCode.POLICY_DENIED.value,
            duration_ms=0.0,
            arguments=arguments,
            identity=who.audit_fields(),
            facts={"http_status": 403, "insufficient_scope": list(wanted)},
        )
        description = f"{name} needs a scope opening toolset {toolset}"
        error = {
            "code": types.INVALID_REQUEST,
            "message": f"insufficient_scope: {description}",
            "data": {"error": "insufficient_scope", "scope": " ".join(wanted), "code": "policy_denied"},
        }
        body = json.dumps({"jsonrpc": "2.0", "id": call.id, "error": error}).encode()
        header = challenge_header(wanted, self._metadata_url, description)
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode("ascii")),
                    (b"www-authenticate", header.encode("latin-1")),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class _Call:
    id: str | int
    name: str
    arguments: dict[str, Any]


def _tool_call(body: bytes) -> _Call | None:
    """The JSON-RPC ``tools/call`` request in ``body``; None for anything else."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    request_id = message.get("id")
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        return None  # a notification or a malformed request: the transport answers it
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    arguments = params.get("arguments")
    return _Call(request_id, params["name"], arguments if isinstance(arguments, dict) else {})
