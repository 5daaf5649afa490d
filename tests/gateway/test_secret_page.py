"""The one-time password page and its broker, over real HTTP requests to the real Starlette routes.

No target is involved: these pin the page's own rules (single use, expiry, CSRF, origin, headers, size
caps, what is shown and what never is). The browser and the privileged command are in test_root_exec.py.
"""

from __future__ import annotations

import base64
import re
import time
from urllib.parse import urlencode, urlsplit

import anyio
import anyio.abc
import httpx
import pytest
from starlette.applications import Starlette

from gateway._redact import Redactor
from gateway.config import RootSettings
from gateway.secrets.broker import Entry, SecretBroker
from gateway.secrets.listener import LoopbackListener
from gateway.secrets.page import secret_routes
from remoteops import PrivilegeError, SecretRequest, SecretRequired

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:9"
REQUEST = SecretRequest(target="web1", provider="sudo_password", account="deploy", login="deploy@web1:22")


class Clock:
    """Monotonic time the test advances: what the links' lifetimes are measured in."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _broker(clock: Clock | None = None, **settings: float) -> tuple[SecretBroker, Redactor]:
    redactor = Redactor()
    broker = SecretBroker(RootSettings(**settings), redactor, clock=clock or time.monotonic)
    broker.serve_at(BASE)
    return broker, redactor


def _client(broker: SecretBroker) -> httpx.AsyncClient:
    app = Starlette(routes=secret_routes(broker))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


async def _link(broker: SecretBroker, principal: str = "p1") -> tuple[Entry, str]:
    with pytest.raises(SecretRequired) as info:
        await broker.obtain(REQUEST, principal, None)
    url = info.value.entry
    entry = broker.entry(url.rsplit("/", 1)[1])
    assert entry is not None
    return entry, url


async def test_the_link_is_a_256_bit_path_named_in_the_error_with_its_lifetime() -> None:
    broker, _ = _broker()
    entry, url = await _link(broker)
    token = url.removeprefix(f"{BASE}/secret/")
    assert len(base64.urlsafe_b64decode(token + "=")) == 32
    assert token == entry.token
    _, other = await _link(broker)
    assert other != url


async def test_the_page_names_target_and_account_and_forbids_caching_framing_and_foreign_resources() -> None:
    broker, _ = _broker()
    entry, url = await _link(broker)
    async with _client(broker) as client:
        page = await client.get(url)
    assert page.status_code == 200
    assert ">web1<" in page.text
    assert ">deploy<" in page.text
    assert page.headers["cache-control"].startswith("no-store")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "form-action 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert not re.search(r"(src|href)=\"?(https?:)?//", page.text)  # nothing loaded from anywhere
    assert entry.csrf in page.text
    assert "samesite=strict" in page.headers["set-cookie"].lower()


async def test_a_submitted_password_is_used_once_and_the_link_is_gone() -> None:
    broker, redactor = _broker()
    entry, url = await _link(broker)
    password = "s3cret-Pass-word"
    async with _client(broker) as client:
        await client.get(url)
        done = await client.post(
            url, data={"csrf": entry.csrf, "password": password}, headers={"Origin": BASE}
        )
        again = await client.get(url)
        repost = await client.post(
            url, data={"csrf": entry.csrf, "password": password}, headers={"Origin": BASE}
        )
    assert done.status_code == 200
    assert password not in done.text
    assert done.headers["cache-control"].startswith("no-store")
    assert again.status_code == 410
    assert repost.status_code == 410
    assert redactor.text(f"x {password} y") == "x [REDACTED] y"  # registered while it waits
    got = await broker.obtain(REQUEST, "p1", None)
    assert bytes(got) == password.encode()
    assert redactor.text(password) == password  # forgotten after its one use
    with pytest.raises(SecretRequired):
        await broker.obtain(REQUEST, "p1", None)  # one use only


async def test_an_entered_password_serves_only_the_caller_who_got_the_link() -> None:
    broker, _ = _broker()
    entry, url = await _link(broker, principal="alice")
    async with _client(broker) as client:
        await client.get(url)
        await client.post(url, data={"csrf": entry.csrf, "password": "pw-of-alice"}, headers={"Origin": BASE})
    with pytest.raises(SecretRequired):
        await broker.obtain(REQUEST, "mallory", None)
    assert bytes(await broker.obtain(REQUEST, "alice", None)) == b"pw-of-alice"


GOOD = "the form's own token"


@pytest.mark.parametrize(
    ("csrf", "password", "origin", "cookie", "status"),
    [
        (None, "pw-123456", BASE, True, 403),
        ("forged", "pw-123456", BASE, True, 403),
        (GOOD, "pw-123456", BASE, False, 403),  # the right token but no cookie: another browser
        (GOOD, "pw-123456", "http://evil.example", True, 403),
        (GOOD, "", BASE, True, 400),
        (GOOD, "two\nlines", BASE, True, 400),
        (GOOD, "x" * 5000, BASE, True, 413),
    ],
    ids=["no-csrf", "forged-csrf", "no-cookie", "cross-origin", "empty", "newline", "too-large"],
)
async def test_a_bad_submission_is_refused_and_the_link_stays_usable(
    csrf: str | None, password: str, origin: str, cookie: bool, status: int
) -> None:
    broker, _ = _broker()
    entry, url = await _link(broker)
    data = {"password": password}
    if csrf is not None:
        data["csrf"] = entry.csrf if csrf == GOOD else csrf
    async with _client(broker) as client:
        await client.get(url)
        if not cookie:
            client.cookies.clear()
        refused = await client.post(url, data=data, headers={"Origin": origin})
    assert refused.status_code == status
    assert broker.entry(entry.token) is not None


async def test_an_unknown_or_expired_link_is_gone() -> None:
    clock = Clock()
    broker, _ = _broker(clock, secret_ttl_s=1)
    entry, url = await _link(broker)
    assert entry.expires == clock.now + 1  # secret_ttl_s from the link's creation
    async with _client(broker) as client:
        unknown = await client.get(f"{BASE}/secret/{'A' * 43}")
        clock.now = entry.expires  # the link's lifetime has passed
        expired = await client.get(url)
    assert unknown.status_code == 410
    assert expired.status_code == 410
    assert broker.counters["expired"] == 1


async def test_askpass_answers_without_a_page_and_its_failure_is_a_privilege_error(tmp_path: object) -> None:
    ok = SecretBroker(
        RootSettings(askpass_command=("sh", "-c", 'printf "%s-pw\\n" "$ROG_ACCOUNT"')), Redactor()
    )
    assert bytes(await ok.obtain(REQUEST, "p1", None)) == b"deploy-pw"
    failing = SecretBroker(RootSettings(askpass_command=("sh", "-c", "exit 1")), Redactor())
    with pytest.raises(PrivilegeError) as info:
        await failing.obtain(REQUEST, "p1", None)
    assert info.value.reason == "declined"
    slow = SecretBroker(RootSettings(askpass_command=("sleep", "30"), askpass_timeout_s=0.5), Redactor())
    with anyio.fail_after(10), pytest.raises(PrivilegeError) as late:
        await slow.obtain(REQUEST, "p1", None)
    assert late.value.reason == "declined"


class _LookupCounter(SecretBroker):
    """Counts the page's lookups of a link, so a test knows a request has started (found the entry)."""

    lookups = 0

    def entry(self, token: str) -> Entry | None:
        self.lookups += 1
        return super().entry(token)

    async def wait_for_lookups(self, count: int) -> None:
        with anyio.fail_after(10):
            while self.lookups < count:  # noqa: ASYNC110 - the server runs in this loop; no event to wait on
                await anyio.sleep(0.005)


def _counting_broker() -> _LookupCounter:
    broker = _LookupCounter(RootSettings(), Redactor())
    broker.serve_at(BASE)
    return broker


async def _raw_post_head(url: str, entry: Entry, body: bytes) -> anyio.abc.SocketStream:
    """Open a connection and send a POST's head and the first 5 bytes of its body; the rest comes later."""
    parts = urlsplit(url)
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nOrigin: {parts.scheme}://{parts.netloc}\r\n"
        f"Cookie: rog_csrf={entry.csrf}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    await stream.send(head + body[:5])
    return stream


async def _finish(stream: anyio.abc.SocketStream, body: bytes) -> int:
    """Send the rest of the body and read the answer's status line; the HTTP status (the connection is not
    read to its end: the listener may keep it open for its keep-alive time)."""
    await stream.send(body[5:])
    answer = b""
    with anyio.fail_after(10):
        while b"\r\n" not in answer:
            try:
                answer += await stream.receive()
            except anyio.EndOfStream:
                break
    await stream.aclose()
    return int(answer.split(b" ", 2)[1])


async def test_two_slow_submissions_on_two_connections_claim_the_link_once_and_the_first_wins() -> None:
    # Both requests find the live link when they start; their bodies arrive later. The first to complete
    # uses the link; the second gets 410 and must not replace the password the human was told was received.
    broker = _counting_broker()
    async with LoopbackListener(broker) as listener:
        base = await listener.start()
        broker.serve_at(base)
        entry, url = await _link(broker)
        right = urlencode({"csrf": entry.csrf, "password": "the-right-one"}).encode()
        wrong = urlencode({"csrf": entry.csrf, "password": "a-wrong-one!"}).encode()
        before = broker.lookups
        first = await _raw_post_head(url, entry, right)
        second = await _raw_post_head(url, entry, wrong)
        await broker.wait_for_lookups(before + 2)  # both requests hold the live entry, bodies pending
        assert await _finish(first, right) == 200
        assert await _finish(second, wrong) == 410
    assert bytes(await broker.obtain(REQUEST, "p1", None)) == b"the-right-one"
    assert broker.counters["submitted"] == 1


async def test_a_submission_whose_body_arrives_after_the_link_expired_is_gone() -> None:
    broker = _counting_broker()
    async with LoopbackListener(broker) as listener:
        base = await listener.start()
        broker.serve_at(base)
        entry, url = await _link(broker)
        body = urlencode({"csrf": entry.csrf, "password": "too-late-pw"}).encode()
        before = broker.lookups
        late = await _raw_post_head(url, entry, body)
        await broker.wait_for_lookups(before + 1)  # the request found the live entry; its body is pending
        entry.expires = time.monotonic() - 1  # the link's lifetime passes while the body is on its way
        assert await _finish(late, body) == 410
    with pytest.raises(SecretRequired):
        await broker.obtain(REQUEST, "p1", None)
