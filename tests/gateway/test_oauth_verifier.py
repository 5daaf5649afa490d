"""The OAuth token verifier against a real authorization server on loopback (keys, JWKS, introspection)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.abc
import httpx
import pytest
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp

from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.auth.oauth import OAuthVerifier
from gateway.auth.policy import KIND_CLAIM
from gateway.config import OAuthSettings, Settings
from gateway.serving.http import build_http_app
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.fixtures.oauth_server import INTROSPECTION_CLIENT, AuthServer, run_auth_server

pytestmark = pytest.mark.anyio

RESOURCE = "https://gateway.example.test/mcp"
_REAL_ASYNC_CLIENT = httpx.AsyncClient  # the tests' own client (not counted with the verifier's)


class Clock:
    """Monotonic time the test advances (the JWKS refresh bound is measured in it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class WallClock(Clock):
    """Wall-clock time (seconds since the epoch) the test advances: what an introspection answer's ``exp``
    and its cached lifetime are compared with. It starts at the real time, which the authorization server's
    ``exp`` values are written in."""

    def __init__(self) -> None:
        self.now = time.time()


@pytest.fixture
def idp() -> Iterator[AuthServer]:
    with run_auth_server(RESOURCE) as server:
        yield server


Maker = Callable[..., OAuthVerifier]


@pytest.fixture
async def make(idp: AuthServer) -> AsyncIterator[Maker]:
    """Verifiers of ``idp`` (``make(clock, wall_clock=…, **settings)``), each closed (its HTTP client) after
    the test."""
    made: list[OAuthVerifier] = []

    def factory(
        clock: Clock | None = None, *, wall_clock: WallClock | None = None, **overrides: object
    ) -> OAuthVerifier:
        made.append(_verifier(idp, clock, wall_clock=wall_clock, **overrides))
        return made[-1]

    yield factory
    for verifier in made:
        await verifier.aclose()


def _verifier(
    idp: AuthServer, clock: Clock | None = None, *, wall_clock: WallClock | None = None, **overrides: object
) -> OAuthVerifier:
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
        cfg,
        resource=RESOURCE,
        introspection_secret=idp.introspection_secret,
        clock=clock or Clock(),
        wall_clock=wall_clock or time.time,
    )


async def test_a_valid_jwt_yields_subject_client_and_scopes(idp: AuthServer, make: Maker) -> None:
    with anyio.fail_after(10):
        token = await make().verify_token(idp.issue("alice", "remoteops:inspect remoteops:execute"))
    assert token is not None
    assert (token.subject, token.client_id) == ("alice", "client-of-alice")
    assert token.scopes == ["remoteops:inspect", "remoteops:execute"]
    assert (token.claims or {})[KIND_CLAIM] == "oauth"


@pytest.mark.parametrize(
    "claims",
    [
        # times relative to when the test runs (a value taken at collection ages through a long run)
        pytest.param({"exp": -60}, id="expired"),
        pytest.param({"nbf": 600}, id="not-yet-valid"),
        pytest.param({"iss": "http://127.0.0.1:1/other-issuer"}, id="wrong-issuer"),
        pytest.param({"aud": "https://other.example.test/mcp"}, id="wrong-audience"),
        pytest.param({"aud": None}, id="no-audience"),
        pytest.param({"exp": None}, id="no-expiry"),
    ],
)
async def test_a_jwt_with_bad_claims_is_refused(idp: AuthServer, claims: dict[str, Any], make: Maker) -> None:
    now = int(time.time())
    claims = {k: now + v if k in {"exp", "nbf"} and v is not None else v for k, v in claims.items()}
    verifier = make()
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is not None
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect", **claims)) is None


NEAR_MISS_AUDIENCES = [
    pytest.param(RESOURCE + "/", id="trailing-slash"),
    pytest.param("https://gateway.example.test/", id="parent-path"),
    pytest.param("https://gateway.example.test", id="origin-only"),
    pytest.param(RESOURCE + "/child", id="child-path"),
    pytest.param("https://gateway.example.test/MCP", id="path-case"),
    pytest.param(RESOURCE + "?x=1", id="query"),
    pytest.param(RESOURCE + "#f", id="fragment"),
    pytest.param(" " + RESOURCE, id="leading-space"),
]
"""Audiences that are not this resource though a lenient comparison (prefix, trailing-slash folding, the
SDK's ``check_resource_allowed`` hierarchy) would take them for it."""


@pytest.mark.parametrize("aud", NEAR_MISS_AUDIENCES)
async def test_a_jwt_whose_audience_is_a_near_miss_of_the_resource_is_refused(
    idp: AuthServer, make: Maker, aud: str
) -> None:
    verifier = make()
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect", aud=aud)) is None
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect", aud=[aud])) is None
        both = idp.issue("alice", "remoteops:inspect", aud=[aud, RESOURCE])
        assert await verifier.verify_token(both) is not None  # one exact member is enough


@pytest.mark.parametrize("aud", NEAR_MISS_AUDIENCES)
async def test_an_introspected_token_whose_audience_is_a_near_miss_of_the_resource_is_refused(
    idp: AuthServer, make: Maker, aud: str
) -> None:
    verifier = make()
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue_opaque("bob", "remoteops:inspect", aud=aud)) is None
        assert await verifier.verify_token(idp.issue_opaque("bob", "remoteops:inspect", aud=[aud])) is None
        both = idp.issue_opaque("bob", "remoteops:inspect", aud=[aud, RESOURCE])
        assert await verifier.verify_token(both) is not None


@pytest.mark.parametrize(
    ("configured", "advertised"),
    [
        pytest.param("https://GW.Example.test:443/mcp", "https://gw.example.test/mcp", id="host-case-port"),
        pytest.param("https://gw.example.test", "https://gw.example.test/", id="empty-path"),
    ],
)
async def test_the_resource_as_configured_and_as_the_metadata_spells_it_are_both_its_audience(
    idp: AuthServer, configured: str, advertised: str
) -> None:
    cfg = OAuthSettings.model_validate(
        {
            "issuer": idp.issuer,
            "jwks_url": idp.jwks_url,
            "introspection_url": idp.introspection_url,
            "introspection_client_id": INTROSPECTION_CLIENT,
        }
    )
    async with OAuthVerifier(cfg, resource=configured, introspection_secret=idp.introspection_secret) as v:
        assert v.audiences == {configured, advertised}
        with anyio.fail_after(10):
            for aud in (configured, advertised):
                assert await v.verify_token(idp.issue("alice", "remoteops:inspect", aud=aud)) is not None
                assert await v.verify_token(idp.issue_opaque("bob", "remoteops:inspect", aud=aud)) is not None
            assert (
                await v.verify_token(idp.issue("alice", "remoteops:inspect", aud=advertised + "x/")) is None
            )


async def test_an_expiry_inside_the_leeway_is_still_accepted(idp: AuthServer, make: Maker) -> None:
    with anyio.fail_after(10):
        token = idp.issue("alice", "remoteops:inspect", exp=int(time.time()) - 2)
        assert await make(leeway_s=5).verify_token(token) is not None
        assert await make(leeway_s=0).verify_token(token) is None


async def test_an_unsigned_alg_none_token_is_refused(idp: AuthServer, make: Maker) -> None:
    verifier = make()
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.unsigned("alice", "remoteops:root")) is None


async def test_a_token_signed_by_a_key_not_in_the_jwks_is_refused(idp: AuthServer, make: Maker) -> None:
    verifier = make()
    idp.rotate(publish=False)
    with anyio.fail_after(10):
        assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is None


async def test_a_rotated_key_is_accepted_after_a_jwks_refresh(idp: AuthServer, make: Maker) -> None:
    clock = Clock()
    verifier = make(clock)
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


async def test_a_flood_of_unknown_kids_fetches_the_jwks_at_most_once_per_interval(
    idp: AuthServer, make: Maker
) -> None:
    clock = Clock()
    verifier = make(clock)
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


async def test_an_opaque_token_is_introspected_and_the_answer_cached(idp: AuthServer, make: Maker) -> None:
    verifier = make()
    opaque = idp.issue_opaque("bob", "remoteops:inspect")
    with anyio.fail_after(10):
        first = await verifier.verify_token(opaque)
        second = await verifier.verify_token(opaque)
    assert first is not None
    assert second == first
    assert (first.subject, first.scopes) == ("bob", ["remoteops:inspect"])
    assert idp.introspection_requests == 1


async def test_introspection_refuses_unknown_wrong_audience_and_wrong_issuer_tokens(
    idp: AuthServer, make: Maker
) -> None:
    verifier = make()
    with anyio.fail_after(10):
        assert await verifier.verify_token("not-a-token-the-idp-issued") is None
        assert await verifier.verify_token(idp.issue_opaque("bob", "x", aud="https://other.test/mcp")) is None
        assert await verifier.verify_token(idp.issue_opaque("bob", "x", iss="http://127.0.0.1:1/x")) is None


async def test_introspection_with_a_wrong_client_secret_accepts_nothing_and_caches_no_refusal(
    idp: AuthServer,
) -> None:
    opaque = idp.issue_opaque("bob", "remoteops:inspect")
    async with OAuthVerifier(
        OAuthSettings(issuer=idp.issuer, introspection_url=idp.introspection_url),
        resource=RESOURCE,
        introspection_secret="wrong-secret-wrong-secret",
    ) as verifier:
        with anyio.fail_after(10):
            assert await verifier.verify_token(opaque) is None
            assert idp.introspection_requests == 1
            # a 401 from the authorization server says nothing about the token: asked again next time
            assert await verifier.verify_token(opaque) is None
    assert idp.introspection_requests == 2


async def test_a_cached_introspection_answer_expires_at_the_tokens_exp(idp: AuthServer, make: Maker) -> None:
    wall = WallClock()
    verifier = make(wall_clock=wall, leeway_s=0)  # the cache cap (300 s) is far beyond exp
    exp = int(wall.now) + 2
    opaque = idp.issue_opaque("bob", "remoteops:inspect", exp=exp)
    with anyio.fail_after(10):
        first = await verifier.verify_token(opaque)
        cached = await verifier.verify_token(opaque)
    assert first is not None
    assert first.expires_at == exp
    assert cached == first
    assert idp.introspection_requests == 1
    wall.now = exp + 0.01  # the token's exp passes
    with anyio.fail_after(10):
        after = await verifier.verify_token(opaque)
    assert after is None  # not answered from the cache: asked again, and the token has expired
    assert idp.introspection_requests == 2


async def test_a_cached_introspection_answer_lives_at_most_introspection_cache_max_s(
    idp: AuthServer, make: Maker
) -> None:
    wall = WallClock()
    verifier = make(wall_clock=wall, introspection_cache_max_s=1)
    opaque = idp.issue_opaque("bob", "remoteops:inspect")  # valid for 600 s
    with anyio.fail_after(10):
        first = await verifier.verify_token(opaque)
    cached_until = wall.now + 1
    assert first is not None
    idp.opaque[opaque]["active"] = False  # revoked at the authorization server
    with anyio.fail_after(10):
        within_cap = await verifier.verify_token(opaque)
    assert within_cap == first  # the cached answer, as documented: a revocation waits for the cap
    assert idp.introspection_requests == 1
    wall.now = cached_until + 0.01  # the cap passes
    with anyio.fail_after(10):
        after_cap = await verifier.verify_token(opaque)
    assert after_cap is None  # asked again and told the token is no longer active
    assert idp.introspection_requests == 2


async def test_the_introspection_cache_holds_at_most_introspection_cache_max_entries(
    idp: AuthServer, make: Maker
) -> None:
    verifier = make(introspection_cache_max=3)
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


async def test_an_introspection_cache_of_size_zero_asks_every_time(idp: AuthServer, make: Maker) -> None:
    verifier = make(introspection_cache_max=0)
    opaque = idp.issue_opaque("bob", "remoteops:inspect")
    with anyio.fail_after(10):
        answers = [await verifier.verify_token(opaque) for _ in range(3)]
    assert all(a is not None for a in answers)
    assert idp.introspection_requests == 3


async def test_concurrent_verifications_of_one_uncached_token_share_one_introspection_request(
    idp: AuthServer, make: Maker
) -> None:
    verifier = make()
    opaque = idp.issue_opaque("bob", "remoteops:inspect")
    answers: list[AccessToken | None] = []
    refusals: list[AccessToken | None] = []

    async def verify(token: str, into: list[AccessToken | None]) -> None:
        into.append(await verifier.verify_token(token))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(verify, opaque, answers)
                tg.start_soon(verify, "made-up-token-asked-by-twenty-at-once", refusals)
    assert len(answers) == len(refusals) == 20
    assert all(a is not None and a.subject == "bob" for a in answers)
    assert refusals == [None] * 20
    assert idp.introspection_requests == 2  # one per token, not one per verification


async def test_a_refused_token_is_not_asked_again_within_the_negative_ttl_and_is_after_it(
    idp: AuthServer, make: Maker
) -> None:
    clock = Clock()
    verifier = make(clock, introspection_negative_cache_s=5)
    revoked = idp.issue_opaque("bob", "remoteops:inspect")
    idp.opaque[revoked]["active"] = False
    elsewhere = idp.issue_opaque("bob", "remoteops:inspect", aud="https://other.test/mcp")
    with anyio.fail_after(20):
        for token in ("bogus-token-never-issued", revoked, elsewhere):
            asked = idp.introspection_requests
            assert await verifier.verify_token(token) is None
            assert await verifier.verify_token(token) is None
            assert idp.introspection_requests == asked + 1  # the second refusal came from the cache
        clock.now += 5.01
        for token in ("bogus-token-never-issued", revoked, elsewhere):
            assert await verifier.verify_token(token) is None
    assert idp.introspection_requests == 6  # past the TTL each was asked again


async def test_a_negative_cache_ttl_of_zero_asks_every_time(idp: AuthServer, make: Maker) -> None:
    verifier = make(introspection_negative_cache_s=0)
    with anyio.fail_after(10):
        for _ in range(3):
            assert await verifier.verify_token("bogus-token-never-issued") is None
    assert idp.introspection_requests == 3


async def test_the_negative_cache_holds_at_most_introspection_cache_max_entries(
    idp: AuthServer, make: Maker
) -> None:
    verifier = make(introspection_cache_max=3)
    bogus = [f"bogus-token-{i}" for i in range(8)]
    valid = idp.issue_opaque("bob", "remoteops:inspect")
    with anyio.fail_after(30):
        assert await verifier.verify_token(valid) is not None
        for token in bogus:
            assert await verifier.verify_token(token) is None
        assert idp.introspection_requests == 9
        for token in bogus[-3:]:  # the newest three refusals are still cached
            assert await verifier.verify_token(token) is None
        assert await verifier.verify_token(valid) is not None  # refusals never evict acceptances
        assert idp.introspection_requests == 9
        for token in bogus[:5]:  # every older refusal was evicted: each is asked again
            assert await verifier.verify_token(token) is None
    assert idp.introspection_requests == 14


class _CountedClient(httpx.AsyncClient):
    """httpx's client, counting the instances made (the verifier's are what is counted)."""

    made: ClassVar[list[httpx.AsyncClient]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _CountedClient.made.append(self)


@pytest.fixture
def counted_clients(monkeypatch: pytest.MonkeyPatch) -> list[httpx.AsyncClient]:
    made: list[httpx.AsyncClient] = []
    monkeypatch.setattr(_CountedClient, "made", made)
    monkeypatch.setattr(httpx, "AsyncClient", _CountedClient)
    return made


async def test_one_http_client_serves_every_introspection_and_jwks_fetch_until_the_verifier_closes(
    idp: AuthServer, counted_clients: list[httpx.AsyncClient]
) -> None:
    tokens = [idp.issue_opaque(f"user{i}", "remoteops:inspect") for i in range(5)]
    async with _verifier(idp, introspection_cache_max=0) as verifier:
        with anyio.fail_after(20):
            for token in [*tokens, "bogus-token-never-issued"]:
                await verifier.verify_token(token)
            assert await verifier.verify_token(idp.issue("alice", "remoteops:inspect")) is not None
        assert (idp.introspection_requests, idp.jwks_requests) == (6, 1)
        assert len(counted_clients) == 1
        assert not counted_clients[0].is_closed
    assert counted_clients[0].is_closed


@asynccontextmanager
async def _asgi_lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """Run ``app``'s ASGI lifespan (startup before the block, shutdown after it), as a server does."""
    to_app, app_in = anyio.create_memory_object_stream[dict[str, Any]](2)
    app_out, from_app = anyio.create_memory_object_stream[dict[str, Any]](2)
    async with to_app, app_in, app_out, from_app, anyio.create_task_group() as tg:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        tg.start_soon(app, scope, app_in.receive, app_out.send)
        with anyio.fail_after(20):
            await to_app.send({"type": "lifespan.startup"})
            assert (await from_app.receive())["type"] == "lifespan.startup.complete"
        try:
            yield
        finally:
            with anyio.fail_after(20):
                await to_app.send({"type": "lifespan.shutdown"})
                assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"


async def test_the_http_apps_shutdown_closes_the_verifiers_client(
    idp: AuthServer, tmp_path: Path, counted_clients: list[httpx.AsyncClient]
) -> None:
    secret = tmp_path / "introspection-secret"
    secret.write_text(idp.introspection_secret)
    secret.chmod(0o600)
    oauth = {
        "issuer": idp.issuer,
        "resource": RESOURCE,
        "introspection_url": idp.introspection_url,
        "introspection_client_id": INTROSPECTION_CLIENT,
        "introspection_secret_file": str(secret),
    }
    settings = Settings.model_validate(
        {"state_dir": str(tmp_path / "s"), "auth": {"mode": "oauth", "oauth": oauth}}
    )
    async with Runtime(settings, all_specs(), redactor=Redactor()) as rt:
        app = build_http_app(build_server(rt), settings, token=None, port=8080, runtime=rt)
        async with _asgi_lifespan(app):
            transport = httpx.ASGITransport(app=app)
            async with _REAL_ASYNC_CLIENT(transport=transport, base_url="http://127.0.0.1:8080") as http:
                with anyio.fail_after(20):
                    refused = await http.post(
                        "/mcp", headers={"Authorization": "Bearer bogus-token-never-issued"}, json={}
                    )
            assert refused.status_code == 401
            assert idp.introspection_requests == 1
            assert [c.is_closed for c in counted_clients] == [False]
    assert [c.is_closed for c in counted_clients] == [True]


async def test_a_verification_waiting_on_a_cancelled_ones_introspection_asks_itself(tmp_path: Path) -> None:
    # An authorization server of the test's own on loopback: it holds the first request unanswered (the
    # asker is then cancelled) and answers the second; without the hand-over the waiting verification
    # would end with the cancelled one's "no answer" and never ask.
    answer = json.dumps({"active": True, "iss": "http://127.0.0.1:1/issuer", "aud": RESOURCE, "sub": "bob",
                         "scope": "remoteops:inspect", "exp": int(time.time()) + 600}).encode()  # fmt: skip
    arrived: list[anyio.Event] = [anyio.Event(), anyio.Event()]

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            index = sum(e.is_set() for e in arrived)
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive()
            headers, _, body = request.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", headers).group(1))  # type: ignore[union-attr]
            while len(body) < length:
                body += await stream.receive()
            arrived[index].set()
            if index == 0:
                await anyio.sleep_forever()  # held: the asker is cancelled while waiting
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            await stream.send(head + b"Content-Length: %d\r\n\r\n" % len(answer) + answer)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610 - anyio's attribute, no SQL
    cfg = OAuthSettings(
        issuer="http://127.0.0.1:1/issuer", introspection_url=f"http://127.0.0.1:{port}/introspect"
    )
    got: list[AccessToken | None] = []
    answered = anyio.Event()
    async with listener, OAuthVerifier(cfg, resource=RESOURCE) as verifier:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, serve)
                first = anyio.CancelScope()

                async def cancelled() -> None:
                    with first:
                        await verifier.verify_token("opaque-token")

                async def waiting() -> None:
                    got.append(await verifier.verify_token("opaque-token"))
                    answered.set()

                tg.start_soon(cancelled)
                await arrived[0].wait()  # the first verification's request is at the server
                tg.start_soon(waiting)
                await anyio.wait_all_tasks_blocked()  # the second waits on the first's request
                assert not arrived[1].is_set()
                first.cancel()
                await arrived[1].wait()  # and, the first cancelled, asks itself
                await answered.wait()
                tg.cancel_scope.cancel()
    assert [t.subject if t else None for t in got] == ["bob"]
