"""Guarded streamable-HTTP serving: Host/Origin allow-lists, body cap, bearer auth, /healthz.

* Host and Origin are checked by the SDK's transport security with explicit allow-lists (loopback by
  default; deployments behind a reverse proxy list their names) → 421 / 403.
* Bodies over the cap → 413.
* Bearer authentication is on by default; the token file is generated (0600) on first run. No or wrong
  token → 401 with ``WWW-Authenticate: Bearer error="invalid_token"``. A static token is not OAuth: no
  RFC 9728 protected-resource metadata is served or advertised (it would name an authorization server
  that serves nothing, and clients would start an interactive OAuth flow); that belongs to an OAuth mode.
* ``auth.mode = "oauth"``: the gateway is an OAuth 2.1 resource server (``gateway.auth.oauth``). The SDK's
  bearer middleware checks each token with :class:`~gateway.auth.oauth.OAuthVerifier`; the RFC 9728
  protected-resource metadata is served at ``/.well-known/oauth-protected-resource<path>``, names the
  configured issuer as the authorization server and lists the configured scopes (``scopes_supported``);
  a 401 points to it (``resource_metadata=``). A ``tools/call`` outside the token's scopes gets 403
  ``insufficient_scope`` naming the scopes to ask for (``gateway.auth.scope``). The SDK ties
  ``scopes_supported`` to ``required_scopes`` (which every token would then need), so its metadata route
  is replaced by one built with the SDK's own route factory, and the MCP route is wrapped in place.
* ``auth.trusted_proxy`` (bearer or oauth mode): identity headers of an authenticating proxy in front,
  believed only from its loopback peers with its shared secret (``gateway.auth.proxy``).
* ``GET /healthz`` answers without auth: status only, no secrets, no tool data.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings as SdkAuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway._errors import ConfigError
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.auth.policy import KIND_CLAIM
from gateway.auth.proxy import ProxyAwareVerifier, TrustedProxy, read_secret_file
from gateway.auth.scope import ScopeChallenge
from gateway.config import Settings
from gateway.serving.answer import AnswerAsJson
from gateway.serving.server import GatewayServer
from remoteops import atomic_write

if TYPE_CHECKING:
    from gateway.auth.oauth import OAuthVerifier

__all__ = [
    "StaticTokenVerifier",
    "TrimHeaderWhitespace",
    "build_http_app",
    "check_auth_choice",
    "ensure_token",
    "is_loopback_host",
    "public_url",
]

_LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
_LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def public_url(settings: Settings, port: int) -> str:
    host = settings.server.host
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):  # noqa: S104 - only formatting a URL for a wildcard bind
        shown = "127.0.0.1"
    return f"http://{shown}:{port}{settings.server.path}"


def _generate_token(path: Path, what: str = "bearer token") -> str:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_urlsafe(32)
        # complete or absent, never half-written; a concurrent first run's token wins
        atomic_write(path, (token + "\n").encode(), mode=0o600, replace=False)
    except FileExistsError:
        return ensure_token(path, what)
    except OSError as exc:
        raise ConfigError(f"cannot create the {what} file: {exc.strerror or exc}", source=str(path)) from None
    return token


def ensure_token(path: Path, what: str = "bearer token") -> str:
    """Read the bearer token, generating a fresh one (mode 0600, parent 0700) when the file is missing.

    Every way the file can be unusable is a :class:`ConfigError` naming the path: not UTF-8, a directory,
    unreadable, too short, readable by others, or holding control characters (a token is sent in an HTTP
    header, where those are refused or cut)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return _generate_token(path, what)
    except UnicodeDecodeError:
        raise ConfigError(f"{what} file is not valid UTF-8", source=str(path)) from None
    except IsADirectoryError:
        raise ConfigError(f"{what} path is a directory, not a file", source=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} file: {exc.strerror or exc}", source=str(path)) from None
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in token):
        raise ConfigError(f"{what} contains control characters", source=str(path))
    if len(token) < 16:
        raise ConfigError(f"{what} is shorter than 16 characters", source=str(path))
    if path.stat().st_mode & 0o077:
        raise ConfigError(
            f"{what} file must not be readable by group or others (chmod 600)", source=str(path)
        )
    return token


class StaticTokenVerifier(TokenVerifier):
    """Accepts exactly one bearer token, compared in constant time."""

    def __init__(self, token: str, principal: str = "operator") -> None:
        self._token = token.encode("utf-8")
        self._principal = principal

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode("utf-8"), self._token):
            return AccessToken(
                token=token, client_id=self._principal, scopes=[], claims={KIND_CLAIM: "bearer"}
            )
        return None


def check_auth_choice(settings: Settings, token: str | None) -> None:
    """Serving without a token needs both the explicit flag and a loopback bind (OAuth mode has none)."""
    if settings.auth.mode == "oauth":
        return
    if token is None and not (settings.auth.allow_no_auth and is_loopback_host(settings.server.host)):
        raise ConfigError(
            "turning auth off needs auth.allow_no_auth = true and a loopback bind", key="auth.mode"
        )


class TrimHeaderWhitespace:
    """RFC 9110 §5.5: whitespace around a field value is not part of it. uvicorn's httptools parser keeps
    trailing spaces, and the SDK compares ``Mcp-Name``/``Mcp-Method`` (and we the bearer token) verbatim,
    so values are trimmed once, here, before anything reads them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "headers": [(name, value.strip(b" \t")) for name, value in scope["headers"]]}
        await self.app(scope, receive, send)


def _security(settings: Settings) -> TransportSecuritySettings:
    server = settings.server
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(server.allowed_hosts or _LOOPBACK_HOSTS),
        allowed_origins=list(server.allowed_origins or _LOOPBACK_ORIGINS),
    )


def _oauth_auth(settings: Settings, url: str, redactor: Redactor) -> tuple[SdkAuthSettings, OAuthVerifier]:
    # Imported here: httpx and the JOSE library are loaded only when OAuth is configured (start-up cost).
    from gateway.auth.oauth import OAuthVerifier

    cfg = settings.auth.oauth
    secret = None
    if cfg.introspection_secret_file is not None:
        secret = read_secret_file(cfg.introspection_secret_file, "auth.oauth.introspection_secret_file")
        redactor.add_secret(secret)
    resource = cfg.resource or url
    # The verifier checks the audience itself (RFC 8707 resource as ``aud``), so the SDK's own
    # ``AccessToken.resource`` comparison is off; resource_server_url makes the SDK serve RFC 9728
    # metadata naming the issuer and point 401s to it.
    auth = SdkAuthSettings(issuer_url=cfg.issuer, resource_server_url=resource, validate_token_resource=False)
    return auth, OAuthVerifier(cfg, resource=resource, introspection_secret=secret)


def _route(app: Starlette, path: str) -> tuple[int, Route]:
    for index, route in enumerate(app.router.routes):
        if isinstance(route, Route) and route.path == path:
            return index, route
    raise RuntimeError(f"the SDK's app has no route {path}")  # an SDK change: fail at start-up, loudly


def _oauth_routes(
    app: Starlette, server: GatewayServer, settings: Settings, auth: SdkAuthSettings, runtime: Runtime
) -> None:
    """RFC 9728 metadata with ``scopes_supported``, and step-up 403s on the MCP route (see above)."""
    resource = auth.resource_server_url
    if resource is None:
        raise RuntimeError("oauth mode without a resource URL")
    metadata: list[BaseRoute] = list(
        create_protected_resource_routes(
            resource_url=resource,
            authorization_servers=[auth.issuer_url],
            scopes_supported=list(settings.auth.scopes),
        )
    )
    for new in metadata:
        if isinstance(new, Route):
            index, _ = _route(app, new.path)
            app.router.routes[index] = new
    _, mcp_route = _route(app, settings.server.path)
    mcp_route.app = ScopeChallenge(
        mcp_route.app,
        runtime=runtime,
        policy=server.policy,
        resource_metadata_url=str(build_resource_metadata_url(resource)),
        max_body_bytes=settings.server.max_body_bytes,
    )


def _close_at_shutdown(app: Starlette, verifier: OAuthVerifier) -> None:
    """The verifier's HTTP client lives as long as the app: closed when its lifespan ends."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        try:
            async with inner(app) as state:
                yield state
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await verifier.aclose()

    app.router.lifespan_context = lifespan


def build_http_app(
    server: GatewayServer,
    settings: Settings,
    *,
    token: str | None,
    port: int,
    runtime: Runtime,
    redactor: Redactor | None = None,
    extra_routes: Sequence[Route] = (),
) -> ASGIApp:
    """The Starlette app. ``token=None`` means auth is off (validated by the caller: explicit + loopback),
    unless ``auth.mode = "oauth"``. Secrets read here (introspection, proxy) go to ``redactor``.
    ``extra_routes`` are served without bearer auth, like ``/healthz`` (the one-time password page, whose
    256-bit path is its own capability)."""
    check_auth_choice(settings, token)
    redactor = redactor or Redactor()

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    url = public_url(settings, port)
    auth = None
    verifier: TokenVerifier | None = None
    oauth: OAuthVerifier | None = None
    if settings.auth.mode == "oauth":
        auth, oauth = _oauth_auth(settings, url, redactor)
        verifier = oauth
    elif token is not None:
        # The SDK's bearer middleware, configured as a plain resource: without resource_server_url it
        # neither serves RFC 9728 metadata nor puts resource_metadata= into the 401's WWW-Authenticate.
        # issuer_url is required by the model but unused without an authorization-server provider.
        auth = SdkAuthSettings(issuer_url=url.removesuffix(settings.server.path), resource_server_url=None)
        verifier = StaticTokenVerifier(token)
    proxy_cfg = settings.auth.trusted_proxy
    proxy_secret = None
    if proxy_cfg.secret_file is not None and verifier is not None:
        proxy_secret = read_secret_file(proxy_cfg.secret_file, "auth.trusted_proxy.secret_file")
        redactor.add_secret(proxy_secret)
    # The proxy middleware is made first (the verifier needs its token); its inner app is set below.
    proxy = TrustedProxy(proxy_cfg, proxy_secret)
    redactor.add_secret(proxy.internal_token)
    if verifier is not None and proxy_secret is not None and proxy_cfg.peers:
        verifier = ProxyAwareVerifier(proxy, proxy_cfg.scopes, verifier)
    app = server.streamable_http_app(
        streamable_http_path=settings.server.path,
        stateless_http=settings.server.stateless_http,
        max_request_body_size=settings.server.max_body_bytes,
        transport_security=_security(settings),
        host=settings.server.host,
        auth=auth,
        token_verifier=verifier,
        custom_starlette_routes=[Route("/healthz", healthz, methods=["GET"]), *extra_routes],
    )
    if settings.auth.mode == "oauth" and auth is not None:
        _oauth_routes(app, server, settings, auth, runtime)
    _, mcp_route = _route(app, settings.server.path)
    mcp_route.app = AnswerAsJson(mcp_route.app)
    if oauth is not None:
        _close_at_shutdown(app, oauth)
    proxy.wrap(app)
    return TrimHeaderWhitespace(proxy)
