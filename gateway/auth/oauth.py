"""OAuth 2.1 resource server (``auth.mode = "oauth"``): access tokens checked with the authorization server.

:class:`OAuthVerifier` is the SDK's ``TokenVerifier`` for the SDK's bearer middleware. A JWT access token
is verified with PyJWT against the issuer's JWKS: signature with an allowed asymmetric algorithm (never
``none``, never a shared secret; the header's ``alg`` must be allowed and match the key), ``iss`` exactly
the configured issuer, ``aud`` naming this resource (RFC 8707), ``exp``/``nbf``/``iat`` with a small
leeway.

Audience matching is exact: ``aud`` (or one of its members) must equal, character for character, one of
:func:`resource_audiences` — the resource URL as configured (``auth.oauth.resource``, else the served
URL) or as the RFC 9728 metadata spells it (the same URL parsed once: scheme and host lower-cased, a
default port dropped, an empty path written ``/``). The normalization is applied to the resource side
only, so it never widens what a token may say: no trailing-slash tolerance (``…/mcp/`` is another
resource), no prefix or parent-path match (the SDK's ``check_resource_allowed`` matches path prefixes;
the gateway turns the SDK's resource check off and does its own), no case folding of the path. The same
rule holds for JWTs and for introspection answers.

The JWKS is fetched with httpx, cached for ``jwks_max_age_s``, and refetched when a token names an
unknown ``kid`` — at most once per ``jwks_min_refresh_s`` however many such tokens arrive, so a flood of
made-up ``kid`` values cannot turn the gateway into a load generator against its IdP.

A token that is not a JWT goes to RFC 7662 introspection when ``introspection_url`` is set; an active
answer is cached (keyed by the token's SHA-256, never the token) for the token's remaining life, at most
``introspection_cache_max_s``, and at most ``introspection_cache_max`` entries. A refusal (inactive, or
active but wrong issuer, audience, times) is cached too, for ``introspection_negative_cache_s`` in its own
table of at most ``introspection_cache_max`` entries, so a client retrying a revoked or made-up token does
not ask the authorization server on every request (a failed request — unreachable, an error status — is
not cached). Concurrent verifications of one uncached token share one introspection request.

One ``httpx.AsyncClient`` (its connection pool) serves the verifier's JWKS and introspection requests for
its lifetime, made on first use; :meth:`OAuthVerifier.aclose` closes it (the HTTP app's lifespan does, at
shutdown).

Any failure (bad token, unreachable IdP) is "no token" for the middleware: 401 with ``invalid_token``.
Reasons are logged by name only, never with the token.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Self

import anyio
import httpx
import jwt
import structlog
from mcp.server.auth.provider import AccessToken, TokenVerifier
from pydantic import AnyHttpUrl, ValidationError

from gateway.auth.policy import GROUPS_CLAIM, KIND_CLAIM
from gateway.config import OAuthSettings

__all__ = ["JwksCache", "OAuthVerifier", "resource_audiences"]

_log = structlog.get_logger("gateway.oauth")
_MAX_JWKS_BYTES = 256 * 1024


class JwksCache:
    """The issuer's signing keys by ``kid``; refreshed when stale or on an unknown ``kid``, rate-bounded."""

    def __init__(
        self,
        url: str,
        *,
        min_refresh_s: float,
        max_age_s: float,
        timeout_s: float,
        http: Callable[[], httpx.AsyncClient],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._http = http
        self._clock = clock
        self._min_refresh_s = min_refresh_s
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at = -float("inf")
        self._attempted_at = -float("inf")
        self._lock = anyio.Lock()
        self.fetches = 0
        """JWKS documents requested so far (shown by tests to prove the refresh bound)."""

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        now = self._clock()
        if kid in self._keys and now - self._fetched_at < self._max_age_s:
            return self._keys[kid]
        async with self._lock:  # one fetch at a time; the others see its result
            now = self._clock()
            wanted = kid not in self._keys or now - self._fetched_at >= self._max_age_s
            if wanted and now - self._attempted_at >= self._min_refresh_s:
                self._attempted_at = now
                await self._refresh()
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        self.fetches += 1
        try:
            body = bytearray()
            async with self._http().stream(
                "GET", self._url, headers={"Accept": "application/json"}, timeout=self._timeout_s
            ) as response:
                response.raise_for_status()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > _MAX_JWKS_BYTES:  # read no further than the cap
                        raise ValueError("JWKS document too large")
            document = json.loads(body)
            keys: dict[str | None, jwt.PyJWK] = {}
            for entry in document.get("keys", []) if isinstance(document, dict) else []:
                usable = isinstance(entry, dict) and entry.get("kty") != "oct"
                if not usable or entry.get("use", "sig") != "sig":
                    continue  # shared-secret and encryption keys never verify an access token
                try:
                    keys[entry.get("kid")] = jwt.PyJWK(entry)
                except jwt.PyJWTError:
                    continue
        except (httpx.HTTPError, ValueError) as exc:
            _log.warning("jwks_fetch_failed", url=self._url, error=type(exc).__name__)
            return
        if len(keys) == 1 and None not in keys:
            keys[None] = next(iter(keys.values()))  # a lone key also verifies tokens without a kid
        self._keys = keys
        self._fetched_at = self._clock()


def resource_audiences(resource: str) -> frozenset[str]:
    """The ``aud`` values that name ``resource``: itself, and its spelling in the RFC 9728 metadata (the
    SDK serves the URL as pydantic parses it). Nothing derived from a token: matching stays exact."""
    try:
        advertised = str(AnyHttpUrl(resource))
    except ValidationError:
        return frozenset({resource})
    return frozenset({resource, advertised})


def _scopes(claims: dict[str, Any]) -> list[str]:
    scope = claims.get("scope", claims.get("scp", ""))
    if isinstance(scope, str):
        return scope.split()
    if isinstance(scope, list):
        return [s for s in scope if isinstance(s, str)]
    return []


def _groups(claims: dict[str, Any], claim: str) -> list[str]:
    value = claims.get(claim, [])
    if isinstance(value, str):
        return value.split()
    return [g for g in value if isinstance(g, str)] if isinstance(value, list) else []


class _Flight:
    """One introspection request in progress, awaited by every other verification of the same token."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.answered = False
        self.result: AccessToken | None = None


class OAuthVerifier(TokenVerifier):
    """JWT (JWKS) or introspected access tokens of one issuer, for one resource. Holds one HTTP client for
    its lifetime: close it with :meth:`aclose` (or ``async with``)."""

    def __init__(
        self,
        cfg: OAuthSettings,
        *,
        resource: str,
        introspection_secret: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` measures the JWKS ages and the refusal TTL; ``wall_clock`` (seconds since the epoch) is
        what an introspection answer's ``exp`` and its cached lifetime are compared with (a JWT's ``exp`` is
        PyJWT's to check, against the real time)."""
        self._cfg = cfg
        self.resource = resource
        self.audiences = resource_audiences(resource)
        self._secret = introspection_secret
        self._clock = clock
        self._wall_clock = wall_clock
        self._client: httpx.AsyncClient | None = None
        self.jwks = (
            JwksCache(
                cfg.jwks_url,
                min_refresh_s=cfg.jwks_min_refresh_s,
                max_age_s=cfg.jwks_max_age_s,
                timeout_s=cfg.http_timeout_s,
                http=self._http,
                clock=clock,
            )
            if cfg.jwks_url
            else None
        )
        self._introspected: OrderedDict[str, tuple[AccessToken, float]] = OrderedDict()
        self._refused: OrderedDict[str, float] = OrderedDict()
        """Token digest → (``clock``) time until which its introspection refusal stands."""
        self._flights: dict[str, _Flight] = {}

    def _http(self) -> httpx.AsyncClient:
        """The verifier's one client (made on first use: building it costs tens of milliseconds)."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._cfg.http_timeout_s, follow_redirects=False)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (a later verification would make a new one)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def verify_token(self, token: str) -> AccessToken | None:
        if self.jwks is not None and token.count(".") == 2:
            return await self._verify_jwt(token)
        if self._cfg.introspection_url:
            return await self._introspect(token)
        return None

    # ------------------------------------------------------------------------------------------ JWT

    async def _verify_jwt(self, token: str) -> AccessToken | None:
        if self.jwks is None:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return self._reject("malformed")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._cfg.algorithms:
            return self._reject("algorithm_not_allowed")
        kid = header.get("kid")
        key = await self.jwks.key(kid if isinstance(kid, str) else None)
        if key is None:
            return self._reject("unknown_key")
        if key.algorithm_name != alg:
            return self._reject("algorithm_key_mismatch")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=sorted(self.audiences),
                issuer=self._cfg.issuer,
                leeway=self._cfg.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            return self._reject(type(exc).__name__)
        return self._access_token(token, claims)

    def _access_token(self, token: str, claims: dict[str, Any]) -> AccessToken | None:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            return self._reject("no_subject")
        client_id = claims.get("client_id", claims.get("azp", subject))
        exp = claims.get("exp")
        return AccessToken(
            token=token,
            client_id=client_id if isinstance(client_id, str) else subject,
            scopes=_scopes(claims),
            # The SDK's middleware refuses a token past expires_at (without leeway): the leeway goes in here.
            expires_at=int(exp + self._cfg.leeway_s) if isinstance(exp, (int, float)) else None,
            resource=self.resource,
            subject=subject,
            claims={
                KIND_CLAIM: "oauth",
                GROUPS_CLAIM: _groups(claims, self._cfg.group_claim),
                "iss": self._cfg.issuer,
            },
        )

    @staticmethod
    def _reject(reason: str) -> None:
        _log.info("token_rejected", reason=reason)

    # -------------------------------------------------------------------------------- introspection

    async def _introspect(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        while True:
            known, result = self._cached(digest)
            if known:
                return result
            flight = self._flights.get(digest)
            if flight is None:
                break
            await flight.done.wait()  # bounded: that request is under http_timeout_s
            if flight.answered:
                return flight.result
            # its caller was cancelled before an answer: ask again (the loop finds a newer flight or none)
        flight = self._flights[digest] = _Flight()
        try:
            flight.result = await self._introspect_now(token, digest)
            flight.answered = True
        finally:
            del self._flights[digest]
            flight.done.set()
        return flight.result

    def _cached(self, digest: str) -> tuple[bool, AccessToken | None]:
        """(known, the cached answer): an unexpired acceptance, or a refusal still inside its TTL."""
        accepted = self._introspected.get(digest)
        if accepted is not None:
            if accepted[1] > self._wall_clock():
                return True, accepted[0]
            del self._introspected[digest]
        refused_until = self._refused.get(digest)
        if refused_until is not None:
            if refused_until > self._clock():
                _log.info("token_rejected", reason="refused_recently")
                return True, None
            del self._refused[digest]
        return False, None

    async def _introspect_now(self, token: str, digest: str) -> AccessToken | None:
        now = self._wall_clock()
        answer = await self._ask_introspection(token)
        if answer is None:
            return None  # no answer (unreachable, an error status): nothing learnt, nothing cached
        result = self._check_introspection(token, answer, now)
        limit = self._cfg.introspection_cache_max
        if result is None:
            if limit > 0 and self._cfg.introspection_negative_cache_s > 0:
                self._refused[digest] = self._clock() + self._cfg.introspection_negative_cache_s
                while len(self._refused) > limit:
                    self._refused.popitem(last=False)
        elif limit > 0:
            until = min(float(result.expires_at or now), now + self._cfg.introspection_cache_max_s)
            self._introspected[digest] = (result, until)
            while len(self._introspected) > limit:
                self._introspected.popitem(last=False)
        return result

    async def _ask_introspection(self, token: str) -> dict[str, Any] | None:
        auth = httpx.BasicAuth(self._cfg.introspection_client_id, self._secret) if self._secret else None
        try:
            response = await self._http().post(
                self._cfg.introspection_url,
                data={"token": token, "token_type_hint": "access_token"},
                auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT,
                headers={"Accept": "application/json"},
            )
            response.raise_for_status()
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            _log.warning("introspection_failed", error=type(exc).__name__)
            return None
        return answer if isinstance(answer, dict) else None

    def _check_introspection(self, token: str, answer: dict[str, Any], now: float) -> AccessToken | None:
        if answer.get("active") is not True:
            return self._reject("inactive")
        exp = answer.get("exp")
        if not isinstance(exp, (int, float)) or exp + self._cfg.leeway_s < now:
            return self._reject("expired")
        nbf = answer.get("nbf")
        if isinstance(nbf, (int, float)) and nbf - self._cfg.leeway_s > now:
            return self._reject("not_yet_valid")
        if answer.get("iss", self._cfg.issuer) != self._cfg.issuer:
            return self._reject("wrong_issuer")
        aud = answer.get("aud")
        auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(isinstance(a, str) and a in self.audiences for a in auds):
            return self._reject("wrong_audience")
        return self._access_token(token, answer)
