"""Identity from a trusted authenticating proxy in front (``auth.trusted_proxy``).

An OAuth proxy (oauth2-proxy behind nginx, for instance) that has already authenticated the user passes
who it is in headers (``X-Forwarded-User``, ``X-Forwarded-Groups``). Anyone can send such headers, so
:class:`TrustedProxy` believes them only when the TCP peer is one of the configured loopback addresses
**and** the request carries the configured shared secret header (compared in constant time). Otherwise the
identity and secret headers are removed before anything reads them, and this is logged once.

A believed identity reaches the SDK's bearer middleware the one way it accepts identities, as a bearer
token: the request's ``Authorization`` is replaced by a per-process random token, and the identity is put
in a context variable for that request only. :class:`ProxyAwareVerifier` turns that token back into the
identity (and hands every other token to the real verifier). The random token is worth nothing outside a
request the middleware admitted, and it is registered with the redactor all the same.
"""

from __future__ import annotations

import hmac
import secrets
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import structlog
from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway._errors import ConfigError
from gateway.auth.policy import GROUPS_CLAIM, KIND_CLAIM
from gateway.config import TrustedProxySettings

__all__ = ["ProxyAwareVerifier", "ProxyIdentity", "TrustedProxy", "current_identity", "read_secret_file"]

_log = structlog.get_logger("gateway.proxy")


def read_secret_file(path: Path, key: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
        mode = path.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the secret file: {exc}", source=str(path), key=key) from None
    if mode & 0o077:
        raise ConfigError("secret file must not be readable by group or others (chmod 600)", source=str(path))
    if len(text) < 16:
        raise ConfigError("secret is shorter than 16 characters", source=str(path), key=key)
    return text


@dataclass(frozen=True)
class ProxyIdentity:
    user: str
    groups: tuple[str, ...]


_current: ContextVar[ProxyIdentity | None] = ContextVar("remoteops_proxy_identity", default=None)


def current_identity() -> ProxyIdentity | None:
    """The identity the trusted proxy vouched for on the request being handled (None: no such request)."""
    return _current.get()


class TrustedProxy:
    """ASGI middleware: admit identity headers from the trusted proxy, strip them from anyone else."""

    def __init__(self, cfg: TrustedProxySettings, secret: str | None) -> None:
        self._app: ASGIApp | None = None
        self._peers = frozenset(cfg.peers)
        self._secret = secret.encode("utf-8") if secret else None
        self._secret_header = cfg.secret_header.lower().encode("latin-1")
        self._user_header = cfg.user_header.lower().encode("latin-1")
        self._groups_header = cfg.groups_header.lower().encode("latin-1")
        self._stripped = {self._secret_header, self._user_header, self._groups_header}
        self.internal_token = secrets.token_urlsafe(32)
        self.ignored = 0
        """Requests whose identity headers were not believed (the first one is logged)."""

    def wrap(self, app: ASGIApp) -> None:
        self._app = app

    def _trusted(self, scope: Scope, presented: bytes | None) -> bool:
        client = scope.get("client")
        peer = client[0] if client else None
        if self._secret is None or peer not in self._peers or presented is None:
            return False
        return hmac.compare_digest(presented, self._secret)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            raise RuntimeError("TrustedProxy.wrap() was not called")
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        found: dict[bytes, bytes] = {}
        repeated = False
        for name, value in headers:
            if name in self._stripped:
                repeated = repeated or name in found
                found[name] = value
        if not found:
            await app(scope, receive, send)
            return
        kept = [(name, value) for name, value in headers if name not in self._stripped]
        user = found.get(self._user_header, b"").decode("utf-8", "replace").strip()
        identity = None
        if not repeated and user and self._trusted(scope, found.get(self._secret_header)):
            groups = found.get(self._groups_header, b"").decode("utf-8", "replace")
            names = tuple(g.strip() for g in groups.split(",") if g.strip())
            identity = ProxyIdentity(user=user, groups=names)
            kept = [(n, v) for n, v in kept if n != b"authorization"]
            kept.append((b"authorization", b"Bearer " + self.internal_token.encode("ascii")))
        else:
            self.ignored += 1
            if self.ignored == 1:
                client = scope.get("client")
                _log.warning("identity_headers_ignored", peer=client[0] if client else None)
        reset = _current.set(identity)
        try:
            await app({**scope, "headers": kept}, receive, send)
        finally:
            _current.reset(reset)


class ProxyAwareVerifier(TokenVerifier):
    """The proxy's per-request token → the proxied identity; anything else → the real verifier."""

    def __init__(self, proxy: TrustedProxy, scopes: tuple[str, ...], inner: TokenVerifier) -> None:
        self._proxy = proxy
        self._scopes = list(scopes)
        self._inner = inner

    async def verify_token(self, token: str) -> AccessToken | None:
        identity = _current.get()
        if identity is not None and hmac.compare_digest(
            token.encode("utf-8"), self._proxy.internal_token.encode("ascii")
        ):
            return AccessToken(
                token=token,
                client_id="trusted-proxy",
                scopes=self._scopes,
                subject=identity.user,
                claims={KIND_CLAIM: "proxy", GROUPS_CLAIM: list(identity.groups)},
            )
        return await self._inner.verify_token(token)
