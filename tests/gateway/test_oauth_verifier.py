"""The OAuth token verifier against a real authorization server on loopback (keys, JWKS, introspection)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from gateway._oauth import OAuthVerifier
from gateway._policy import KIND_CLAIM
from gateway.config import OAuthSettings
from tests.fixtures.oauth_server import INTROSPECTION_CLIENT, AuthServer, run_auth_server

pytestmark = pytest.mark.anyio

RESOURCE = "https://gateway.example.test/mcp"


class Clock:
    """Monotonic time the test advances (the JWKS refresh bound is measured in it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def idp() -> Iterator[AuthServer]:
    with run_auth_server(RESOURCE) as server:
        yield server


def _verifier(idp: AuthServer, clock: Clock | None = None, **overrides: object) -> OAuthVerifier:
    cfg = OAuthSettings.model_validate(
        {
            "issuer": idp.issuer,
            "jwks_url": idp.jwks_url,
            "introspection_url": idp.introspection_url,
            "introspection_client_id": INTROSPECTION_CLIENT,
            "leeway_s": 5,
            "jwks_min_refresh_s": 30,
            **overrides,
        }
    )
    return OAuthVerifier(
        cfg, resource=RESOURCE, introspection_secret=idp.introspection_secret, clock=clock or Clock()
    )


async def test_a_valid_jwt_yields_subject_client_and_scopes(idp: AuthServer) -> None:
    with anyio.fail_after(10):
        token = await _verifier(idp).verify_token(idp.issue("alice", "remoteops:inspect remoteops:execute"))
    assert token is not None
    assert (token.subject, token.client_id) == ("alice", "client-of-alice")
    assert token.scopes == ["remoteops:inspect", "remoteops:execute"]
    assert (token.claims or {})[KIND_CLAIM] == "oauth"


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"exp": int(time.time()) - 60}, id="expired"),
        pytest.param({"nbf": int(time.time()) + 600}, id="not-yet-valid"),
        pytest.param({"iss": "http://127.0.0.1:1/other-issuer"}, id="wrong-issuer"),
        pytest.param({"aud": "https://other.example.test/mcp"}, id="wrong-audience"),
        pytest.param({"aud": None}, id="no-audience"),
        pytest.param({"exp": None}, id="no-expiry"),
    ],
)
async def test_a_jwt_with_bad_claims_is_refused(idp: AuthServer, claims: dict[str, Any]) -> None:
    verifier = _verifier(idp)
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is not None
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect", **claims)) is None


async def test_an_expiry_inside_the_leeway_is_still_accepted(idp: AuthServer) -> None:
    with anyio.fail_after(10):
        token = idp.issue("alice", "remoteops:inspect", exp=int(time.time()) - 2)
        assert await _verifier(idp, leeway_s=5).verify_token(token) is not None
        assert await _verifier(idp, leeway_s=0).verify_token(token) is None


async def test_an_unsigned_alg_none_token_is_refused(idp: AuthServer) -> None:
    verifier = _verifier(idp)
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.unsigned("alice", "remoteops:root")) is None


async def test_a_token_signed_by_a_key_not_in_the_jwks_is_refused(idp: AuthServer) -> None:
    verifier = _verifier(idp)
    idp.rotate(publish=False)
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is None


async def test_a_rotated_key_is_accepted_after_a_jwks_refresh(idp: AuthServer) -> None:
    clock = Clock()
    verifier = _verifier(idp, clock)
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is not None
        assert idp.jwks_requests == 1
        idp.rotate(publish=True)
        clock.now += 31  # past jwks_min_refresh_s since the first fetch
        rotated = await verifier.verify_token(idp.issue("alice", "remoteops:inspect"))
    assert rotated is not None
    assert idp.jwks_requests == 2
    with anyio.fail_after(10):  # the old key still verifies (both are published), without another fetch
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect", key=0)) is not None
    assert idp.jwks_requests == 2


async def test_a_flood_of_unknown_kids_fetches_the_jwks_at_most_once_per_interval(idp: AuthServer) -> None:
    clock = Clock()
    verifier = _verifier(idp, clock)
    idp.rotate(publish=False)  # tokens signed by a key the JWKS does not show
    with anyio.fail_after(20):
        for _ in range(25):
            assert await verifier.verify_token(idp.issue("mallory", "remoteops:root")) is None
        assert idp.jwks_requests == 1
        idp.publish_all()
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is None  # still bounded
        assert idp.jwks_requests == 1
        clock.now += 30
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is not None
    assert idp.jwks_requests == 2


async def test_an_opaque_token_is_introspected_and_the_answer_cached(idp: AuthServer) -> None:
    verifier = _verifier(idp)
    opaque = idp.issue_opaque("bob", "remoteops:inspect")
    with anyio.fail_after(10):
        first = await verifier.verify_token(opaque)
        second = await verifier.verify_token(opaque)
    assert first is not None
    assert second == first
    assert (first.subject, first.scopes) == ("bob", ["remoteops:inspect"])
    assert idp.introspection_requests == 1


async def test_introspection_refuses_unknown_wrong_audience_and_wrong_issuer_tokens(idp: AuthServer) -> None:
    verifier = _verifier(idp)
    with anyio.fail_after(10):
        assert await verifier.verify_token("not-a-token-the-idp-issued") is None
        assert await verifier.verify_token(idp.issue_opaque("bob", "x", aud="https://other.test/mcp")) is None
        assert await verifier.verify_token(idp.issue_opaque("bob", "x", iss="http://127.0.0.1:1/x")) is None


async def test_introspection_with_a_wrong_client_secret_accepts_nothing(idp: AuthServer) -> None:
    verifier = OAuthVerifier(
        OAuthSettings(issuer=idp.issuer, introspection_url=idp.introspection_url),
        resource=RESOURCE,
        introspection_secret="wrong-secret-wrong-secret",
    )
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue_opaque("bob", "remoteops:inspect")) is None
    assert idp.introspection_requests == 1


async def _until_wall_clock_passes(moment: float) -> None:
    """Return once ``time.time()`` is past ``moment``: what is tested is expiry in wall-clock time itself
    (an entry's lifetime), not a wait for another actor."""
    await anyio.sleep(max(0.0, moment - time.time()) + 0.05)
    assert time.time() > moment


async def test_a_cached_introspection_answer_expires_at_the_tokens_exp(idp: AuthServer) -> None:
    verifier = _verifier(idp, leeway_s=0)  # the cache cap (300 s) is far beyond exp
    exp = int(time.time()) + 2
    opaque = idp.issue_opaque("bob", "remoteops:inspect", exp=exp)
    with anyio.fail_after(10):
        first = await verifier.verify_token(opaque)
        cached = await verifier.verify_token(opaque)
    assert first is not None
    assert first.expires_at == exp
    assert cached == first
    assert idp.introspection_requests == 1
    await _until_wall_clock_passes(exp)
    with anyio.fail_after(10):
        after = await verifier.verify_token(opaque)
    assert after is None  # not answered from the cache: asked again, and the token has expired
    assert idp.introspection_requests == 2


async def test_a_cached_introspection_answer_lives_at_most_introspection_cache_max_s(idp: AuthServer) -> None:
    verifier = _verifier(idp, introspection_cache_max_s=1)
    opaque = idp.issue_opaque("bob", "remoteops:inspect")  # valid for 600 s
    with anyio.fail_after(10):
        first = await verifier.verify_token(opaque)
    cached_until = time.time() + 1
    assert first is not None
    idp.opaque[opaque]["active"] = False  # revoked at the authorization server
    with anyio.fail_after(10):
        within_cap = await verifier.verify_token(opaque)
    assert within_cap == first  # the cached answer, as documented: a revocation waits for the cap
    assert idp.introspection_requests == 1
    await _until_wall_clock_passes(cached_until)
    with anyio.fail_after(10):
        after_cap = await verifier.verify_token(opaque)
    assert after_cap is None  # asked again and told the token is no longer active
    assert idp.introspection_requests == 2


async def test_the_introspection_cache_holds_at_most_introspection_cache_max_entries(idp: AuthServer) -> None:
    verifier = _verifier(idp, introspection_cache_max=3)
    tokens = [idp.issue_opaque(f"user{i}", "remoteops:inspect") for i in range(8)]
    with anyio.fail_after(30):
        for token in tokens:
            assert await verifier.verify_token(token) is not None
        assert idp.introspection_requests == 8
        for token in tokens[-3:]:  # the newest three are still cached
            assert await verifier.verify_token(token) is not None
        assert idp.introspection_requests == 8
        for token in tokens[:5]:  # every older one was evicted: each is asked again
            assert await verifier.verify_token(token) is not None
    assert idp.introspection_requests == 13


async def test_an_introspection_cache_of_size_zero_asks_every_time(idp: AuthServer) -> None:
    verifier = _verifier(idp, introspection_cache_max=0)
    opaque = idp.issue_opaque("bob", "remoteops:inspect")
    with anyio.fail_after(10):
        answers = [await verifier.verify_token(opaque) for _ in range(3)]
    assert all(a is not None for a in answers)
    assert idp.introspection_requests == 3
