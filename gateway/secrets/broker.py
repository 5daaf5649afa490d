"""Passwords for the privilege providers, entered by a human and never seen by the model.

:class:`SecretBroker` hands each privileged call a :class:`CallSecrets` (remoteops' ``SecretSource``). When a
provider needs a password it is obtained, in this order:

1. a password the same caller already entered on a one-time page for this target, provider and account
   (kept in memory for one use, at most ``root.secret_ttl_s``);
2. the operator's ``root.askpass_command`` on the gateway host (its first stdout line);
3. MCP URL-mode elicitation when the calling client declared it: the client shows the page's link to the
   human; the call waits (at most the link's lifetime) until the page was submitted, then sends
   ``notifications/elicitation/complete``;
4. otherwise the call fails with ``SecretRequired`` (→ ``privilege_error``) whose message carries the link;
   the human opens it, enters the password, and the caller retries: the retry uses it once. On a
   2026-07-28 connection whose client declared URL elicitation, the dispatcher answers that failure with
   an ``InputRequiredResult`` (one URL elicitation, ``request_state`` an opaque id the broker keeps) and the
   client's automatic retry, with the human's ``accept``, waits for the page's submission (:class:`Resume`).

Links (:class:`Entry`) are 256-bit random paths, single use, with a CSRF token and an expiry; the page
itself is ``gateway.secrets.page``. A submitted password is registered with the redactor (defence in depth)
while it waits and forgotten after its use. Nothing here logs or stores a password.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import anyio
import anyio.abc
import mcp_types as types
import structlog

from gateway._redact import Redactor
from gateway.config import RootSettings
from gateway.secrets.askpass import MAX_PASSWORD_BYTES, run_askpass, wipe
from remoteops import PrivilegeError, SecretRequest, SecretRequired

__all__ = ["INPUT_KEY", "CallSecrets", "Entry", "Resume", "SecretBroker", "UrlElicitor"]

_log = structlog.get_logger("gateway.secrets")
INPUT_KEY = "rog_password_page"
"""The key of the one URL elicitation in an ``InputRequiredResult`` (2026-07-28)."""


@dataclass(frozen=True)
class UrlElicitor:
    """The calling client's URL-mode elicitation (only built when the client declared it)."""

    ask: Callable[[str, str, str], Awaitable[types.ElicitResult | types.ErrorData]]  # message, url, id
    complete: Callable[[str], Awaitable[None]]  # elicitation id


@dataclass(frozen=True)
class Resume:
    """A 2026-07-28 retry after an ``InputRequiredResult``: the link it showed and the human's answer."""

    token: str  # the entry's link token (from the broker's own request_state map, never the client's)
    action: str  # accept | decline | cancel


@dataclass(eq=False)
class Entry:
    """One one-time link. ``token``: the 256-bit path; ``csrf``: the form's token."""

    token: str
    csrf: str
    target: str
    provider: str
    account: str
    login: str
    principal: str
    expires: float  # monotonic
    waiting: bool = False  # a URL elicitation waits for this entry itself
    done: bool = False  # submitted, expired or withdrawn: the link answers 410 from now on
    submitted: anyio.Event = field(default_factory=anyio.Event)
    secret: bytearray | None = field(default=None, repr=False)

    def live(self, now: float) -> bool:
        return not self.done and now < self.expires


@dataclass(eq=False)
class _Entered:
    secret: bytearray = field(repr=False)
    text: str = field(repr=False)  # the same password, as registered with the redactor
    expires: float = 0.0


class SecretBroker:
    """Owns the one-time links and the entered passwords; ``base_url`` is where the page is served."""

    def __init__(
        self, settings: RootSettings, redactor: Redactor, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``clock`` (monotonic seconds) measures the links' and the entered passwords' lifetimes."""
        self._settings = settings
        self._clock = clock
        self._redactor = redactor
        self._entries: dict[str, Entry] = {}
        self._entered: dict[tuple[str, str, str, str], _Entered] = {}
        self._states: dict[
            str, tuple[str, str, float]
        ] = {}  # request_state -> (link token, principal, expiry)
        self._base_url: str | None = None
        self._opener: Callable[[], Awaitable[str]] | None = None
        self.counters = {"links": 0, "submitted": 0, "used": 0, "expired": 0, "askpass": 0, "elicited": 0}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for entry in self._entries.values():
            wipe(entry.secret)
        for entered in self._entered.values():
            wipe(entered.secret)
            self._redactor.forget_secret(entered.text)
        self._entries.clear()
        self._entered.clear()

    # -- where the page is -----------------------------------------------------------------------------
    def serve_at(self, base_url: str) -> None:
        """HTTP mode: the page is on the gateway's own listener at ``base_url`` (scheme://host:port)."""
        self._base_url = base_url.rstrip("/")

    def open_with(self, opener: Callable[[], Awaitable[str]]) -> None:
        """stdio mode: ``opener`` starts the loopback listener on first need and returns its base URL."""
        self._opener = opener

    async def _base(self) -> str:
        if self._base_url is None and self._opener is not None:
            self._base_url = (await self._opener()).rstrip("/")
        if self._base_url is None:
            raise PrivilegeError("no listener can serve the password entry page", reason="secret_required")
        return self._base_url

    # -- the page's side ---------------------------------------------------------------------------------
    def _sweep(self) -> None:
        now = self._clock()
        for token in [t for t, e in self._entries.items() if not e.live(now)]:
            entry = self._entries.pop(token)
            if not entry.done:
                self.counters["expired"] += 1
            entry.done = True
            wipe(entry.secret)
        for key in [k for k, e in self._entered.items() if now >= e.expires]:
            entered = self._entered.pop(key)
            wipe(entered.secret)
            self._redactor.forget_secret(entered.text)

    def entry(self, token: str) -> Entry | None:
        """The live entry behind a link, or None (unknown, used or expired look the same)."""
        self._sweep()
        entry = self._entries.get(token)
        return entry if entry is not None and entry.live(self._clock()) else None

    def submit(self, entry: Entry, password: str) -> bool:
        """The human entered ``password`` on ``entry``'s page: claim the link, once.

        The page looks the entry up when a request *starts*, but a request body may arrive much later: two
        submissions on two connections can both hold the live entry. The claim is the check-and-set below
        (no ``await`` between them, so it is atomic on the event loop): the first submission that completes
        uses the link up; every later one is refused (False → 410) and changes nothing."""
        if not entry.live(self._clock()):
            return False
        value = bytearray(password.encode())
        self._redactor.add_secret(password)
        entry.done = True
        self._entries.pop(entry.token, None)
        self.counters["submitted"] += 1
        if entry.waiting:
            entry.secret = value
        else:
            key = (entry.principal, entry.target, entry.provider, entry.account)
            old = self._entered.pop(key, None)
            if old is not None:
                wipe(old.secret)
            self._entered[key] = _Entered(value, password, self._clock() + self._settings.secret_ttl_s)
        entry.submitted.set()
        return True

    @staticmethod
    def acceptable(password: str) -> bool:
        size = len(password.encode("utf-8", "surrogatepass"))
        return 0 < size <= MAX_PASSWORD_BYTES and not any(ch in password for ch in "\r\n\0")

    # -- the calls' side ---------------------------------------------------------------------------------
    def source(
        self, principal: str, elicitor: UrlElicitor | None, resume: Resume | None = None
    ) -> CallSecrets:
        return CallSecrets(self, principal, elicitor, resume)

    def request_state(self, entry_url: str, principal: str) -> str:
        """An opaque ``request_state`` naming the link of ``entry_url`` for ``principal``'s retry."""
        now = self._clock()
        for key in [k for k, (_, _, expiry) in self._states.items() if now >= expiry]:
            del self._states[key]
        state = secrets.token_urlsafe(24)
        token = entry_url.rsplit("/", 1)[-1]
        self._states[state] = (token, principal, now + self._settings.secret_ttl_s)
        return state

    def resume(self, state: str, principal: str, action: str) -> Resume | None:
        """The retry's :class:`Resume`, when ``state`` is one this broker issued to ``principal``."""
        found = self._states.pop(state, None)
        if found is None or found[1] != principal or self._clock() >= found[2]:
            return None
        return Resume(token=found[0], action=action)

    async def _new_entry(self, request: SecretRequest, principal: str, *, waiting: bool) -> tuple[Entry, str]:
        base = await self._base()
        self._sweep()
        entry = Entry(
            token=secrets.token_urlsafe(32),  # 256 bits
            csrf=secrets.token_urlsafe(32),
            target=request.target,
            provider=request.provider,
            account=request.account,
            login=request.login,
            principal=principal,
            expires=self._clock() + self._settings.secret_ttl_s,
            waiting=waiting,
        )
        self._entries[entry.token] = entry
        self.counters["links"] += 1
        return entry, f"{base}/secret/{entry.token}"

    def _take_entered(self, request: SecretRequest, principal: str) -> bytearray | None:
        self._sweep()
        entered = self._entered.pop((principal, request.target, request.provider, request.account), None)
        if entered is None:
            return None
        self.counters["used"] += 1
        self._redactor.forget_secret(entered.text)
        return entered.secret

    async def _askpass(self, request: SecretRequest) -> bytearray | None:
        argv = self._settings.askpass_command
        if not argv:
            return None
        line = await run_askpass(argv, request, timeout_s=self._settings.askpass_timeout_s)
        self.counters["askpass"] += 1
        return line

    def _message(self, request: SecretRequest) -> str:
        return (
            f"{request.provider} on target {request.target!r} needs the password of account "
            f"{request.account!r} ({request.login}). A human must enter it on a one-time page"
        )

    async def obtain(
        self,
        request: SecretRequest,
        principal: str,
        elicitor: UrlElicitor | None,
        resume: Resume | None = None,
    ) -> bytearray:
        entered = self._take_entered(request, principal)
        if entered is not None:
            return entered
        if resume is not None:
            resumed = await self._resumed(request, principal, resume)
            if resumed is not None:
                return resumed
        from_askpass = await self._askpass(request)
        if from_askpass is not None:
            return from_askpass
        ttl = self._settings.secret_ttl_s
        if elicitor is not None:
            entry, url = await self._new_entry(request, principal, waiting=True)
            elicitation_id = secrets.token_hex(16)  # not the link's token: clients may log it
            answer = await elicitor.ask(
                f"{self._message(request)} (valid {ttl:g} s, single use).", url, elicitation_id
            )
            if isinstance(answer, types.ElicitResult):
                return await self._await_entry(entry, answer, elicitor, request, elicitation_id)
            # the client cannot show a URL after all: fall through to the link in the error
            self._withdraw(entry)
        entry, url = await self._new_entry(request, principal, waiting=False)
        once = (
            ""
            if self._settings.agent
            else " With root.agent = false (this gateway's setting) every root command needs the page "
            "again; the operator sets root.agent = true to keep one root agent per target after one entry."
        )
        raise SecretRequired(
            f"{self._message(request)}: open {url} (valid {ttl:g} s, single use), enter it there, then "
            f"retry this call; the password is used once and never reaches this conversation.{once}",
            target=request.target,
            provider=request.provider,
            account=request.account,
            entry=url,
            expires_s=ttl,
            root_agent=self._settings.agent,
        )

    async def _resumed(self, request: SecretRequest, principal: str, resume: Resume) -> bytearray | None:
        """A 2026-07-28 retry: wait (at most the link's lifetime) for the page the human accepted to open."""
        entry = self.entry(resume.token)
        if entry is None or (entry.target, entry.provider, entry.account) != (
            request.target,
            request.provider,
            request.account,
        ):
            return None  # gone or for another question: a fresh link is made
        if resume.action != "accept":
            self._withdraw(entry)
            raise PrivilegeError(
                f"the human {resume.action}d entering the password for {request.account!r}",
                reason="declined",
                provider=request.provider,
            )
        with anyio.move_on_after(max(0.0, entry.expires - self._clock())):
            await entry.submitted.wait()
        return self._take_entered(request, principal)

    def _withdraw(self, entry: Entry) -> None:
        entry.done = True
        self._entries.pop(entry.token, None)
        wipe(entry.secret)

    async def _await_entry(
        self,
        entry: Entry,
        answer: types.ElicitResult,
        elicitor: UrlElicitor,
        request: SecretRequest,
        elicitation_id: str,
    ) -> bytearray:
        if answer.action != "accept":
            self._withdraw(entry)
            raise PrivilegeError(
                f"the human {answer.action}d entering the password for {request.account!r}",
                reason="declined",
                provider=request.provider,
            )
        with anyio.move_on_after(max(0.0, entry.expires - self._clock())):
            await entry.submitted.wait()
        secret, entry.secret = entry.secret, None
        if secret is None:
            self._withdraw(entry)
            raise PrivilegeError(
                f"nobody entered the password for {request.account!r} within "
                f"{self._settings.secret_ttl_s:g} s",
                reason="declined",
                provider=request.provider,
            )
        self.counters["elicited"] += 1
        with anyio.move_on_after(5):
            try:
                await elicitor.complete(elicitation_id)
            except Exception as exc:  # the notification is advisory; the call goes on
                _log.debug("elicitation_complete_not_sent", error=type(exc).__name__)
        return secret


class CallSecrets:
    """The broker as one call's ``SecretSource``: bound to its caller and its client's elicitation."""

    def __init__(
        self,
        broker: SecretBroker,
        principal: str,
        elicitor: UrlElicitor | None,
        resume: Resume | None = None,
    ) -> None:
        self._broker = broker
        self._principal = principal
        self._elicitor = elicitor
        self._resume = resume

    async def obtain(self, request: SecretRequest) -> bytearray:
        resume, self._resume = self._resume, None  # a retry's answer counts for its first question only
        return await self._broker.obtain(request, self._principal, self._elicitor, resume)
