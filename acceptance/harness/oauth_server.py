"""A small, real OAuth 2.1 authorization server for the tests, on loopback.

It signs real JWT access tokens (ES256, PyJWT with keys from ``cryptography``), serves its JWKS at
``/jwks``, RFC 7662 introspection at ``/introspect`` (client-authenticated with HTTP basic auth) and its
RFC 8414 metadata at ``/.well-known/oauth-authorization-server`` (what a client finds by following the
resource's RFC 9728 ``authorization_servers``), and can
rotate its signing key (a new ``kid``). uvicorn serves it from a thread on a socket bound and listening
before the thread starts, so it accepts connections at once; stopping is bounded.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["INTROSPECTION_CLIENT", "AuthServer", "run_auth_server"]

INTROSPECTION_CLIENT = "remoteops-gateway"


@dataclass
class _Key:
    kid: str
    private: ec.EllipticCurvePrivateKey

    def public_jwk(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "alg": "ES256", "use": "sig"}


def _new_key() -> _Key:
    return _Key(kid=secrets.token_hex(8), private=ec.generate_private_key(ec.SECP256R1()))


@dataclass
class AuthServer:
    base: str
    audience: str
    introspection_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    keys: list[_Key] = field(default_factory=lambda: [_new_key()])
    published: int = 1
    """How many of ``keys`` (the oldest first) the JWKS shows: a rotated key is unknown until published."""
    jwks_requests: int = 0
    introspection_requests: int = 0
    opaque: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def issuer(self) -> str:
        return self.base

    @property
    def jwks_url(self) -> str:
        return f"{self.base}/jwks"

    @property
    def introspection_url(self) -> str:
        return f"{self.base}/introspect"

    def claims(self, subject: str, scopes: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.issuer,
            "sub": subject,
            "aud": self.audience,
            "client_id": f"client-of-{subject}",
            "scope": scopes,
            "iat": now,
            "nbf": now,
            "exp": now + 600,
        }
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not None}

    def issue(self, subject: str, scopes: str, *, key: int = -1, **overrides: Any) -> str:
        """A signed JWT access token; ``key`` picks the signing key (default the newest)."""
        signer = self.keys[key]
        return jwt.encode(
            self.claims(subject, scopes, **overrides),
            signer.private,
            algorithm="ES256",
            headers={"kid": signer.kid},
        )

    def unsigned(self, subject: str, scopes: str) -> str:
        """The same claims with ``alg: none`` and no signature (what an attacker would send)."""

        def part(value: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

        header = {"alg": "none", "typ": "JWT", "kid": self.keys[-1].kid}
        return f"{part(header)}.{part(self.claims(subject, scopes))}."

    def issue_opaque(self, subject: str, scopes: str, **overrides: Any) -> str:
        """An opaque (non-JWT) token, valid only through introspection."""
        token = secrets.token_urlsafe(32)
        self.opaque[token] = {"active": True, **self.claims(subject, scopes, **overrides)}
        return token

    def rotate(self, *, publish: bool) -> None:
        """Add a new signing key (new ``kid``); ``publish`` decides whether the JWKS shows it yet."""
        self.keys.append(_new_key())
        if publish:
            self.published = len(self.keys)

    def publish_all(self) -> None:
        self.published = len(self.keys)

    def app(self) -> Starlette:
        async def jwks(_: Request) -> JSONResponse:
            self.jwks_requests += 1
            return JSONResponse({"keys": [k.public_jwk() for k in self.keys[: self.published]]})

        async def introspect(request: Request) -> JSONResponse:
            self.introspection_requests += 1
            expected = f"{INTROSPECTION_CLIENT}:{self.introspection_secret}".encode()
            sent = request.headers.get("authorization", "")
            if sent != "Basic " + base64.b64encode(expected).decode():
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            form = await request.form()
            answer = self.opaque.get(str(form.get("token", "")))
            if answer is None or answer.get("exp", 0) < time.time():
                return JSONResponse({"active": False})
            return JSONResponse(answer)

        async def metadata(_: Request) -> JSONResponse:
            return JSONResponse(
                {
                    "issuer": self.issuer,
                    "jwks_uri": self.jwks_url,
                    "introspection_endpoint": self.introspection_url,
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "client_credentials"],
                }
            )

        return Starlette(
            routes=[
                Route("/jwks", jwks, methods=["GET"]),
                Route("/introspect", introspect, methods=["POST"]),
                Route("/.well-known/oauth-authorization-server", metadata, methods=["GET"]),
            ]
        )


@contextmanager
def run_auth_server(audience: str) -> Iterator[AuthServer]:
    """Serve a fresh authorization server on 127.0.0.1 (a free port) for the duration of the block."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # accepting (queued) before uvicorn's loop runs: no readiness wait needed
    port = sock.getsockname()[1]
    server = AuthServer(base=f"http://127.0.0.1:{port}", audience=audience)
    config = uvicorn.Config(server.app(), log_level="warning", lifespan="off", access_log=False)
    userver = uvicorn.Server(config)
    thread = threading.Thread(target=userver.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        userver.should_exit = True
        thread.join(timeout=30)
        sock.close()
        if thread.is_alive():
            raise RuntimeError("test authorization server did not stop within 30 s")
