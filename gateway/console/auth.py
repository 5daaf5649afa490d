"""Who may use the console and decide approvals: a human operator, never a link alone.

Two ways to be an operator:

* the static **operator token** (``console.operator_token_file``; a file, never an argument), typed once
  into the login form: it opens a server-side session whose 256-bit random id is the cookie
  ``rog_console`` (``HttpOnly``, ``SameSite=Strict``, ``Secure`` on https or with
  ``console.secure_cookies``, at most
  ``console.session_ttl_s``). The token is compared in constant time and never equals the MCP bearer
  token (an agent holding that one cannot log in with it);
* the **trusted proxy's identity** (``auth.trusted_proxy``) with the ``console.operator_group`` group: the
  session is opened for that user on the first page and only serves requests the proxy vouches for as
  that same user.

Every session has its own CSRF token, required in every state-changing form (compared in constant
time) with a same-origin ``Origin`` when the browser sends one. The login form itself is protected by a
double-submit cookie. Time is the injected monotonic ``clock``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from gateway.approvals.hub import Approver
from gateway.auth.proxy import current_identity
from gateway.secrets.page import same_origin

__all__ = ["LOGIN_COOKIE", "SESSION_COOKIE", "OperatorAuth", "Session", "read_form"]

SESSION_COOKIE = "rog_console"
LOGIN_COOKIE = "rog_login"
_MAX_SESSIONS = 1000
MAX_FORM_BYTES = 8192


@dataclass(eq=False)
class Session:
    id: str
    csrf: str
    approver: Approver
    expires: float


async def read_form(request: Request) -> dict[str, str] | None:
    """A small ``application/x-www-form-urlencoded`` body, first value per field; None when refused."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=8)
    except (UnicodeDecodeError, ValueError):
        return None
    return {key: values[0] for key, values in parsed.items() if values}


def _equal(a: str, b: str) -> bool:
    return bool(a) and hmac.compare_digest(a.encode(), b.encode())


class OperatorAuth:
    """The console's sessions. ``token``: the operator token (None: token login is off)."""

    def __init__(
        self,
        token: str | None,
        *,
        group: str,
        ttl_s: float,
        forbidden: tuple[str, ...] = (),
        secure: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``forbidden``: tokens that must never open a session (the MCP bearer token); ``secure``: the
        cookies' ``Secure`` flag (None: when the request came over https)."""
        if token is not None and any(_equal(token, other) for other in forbidden if other):
            raise ValueError("the operator token must not be the MCP bearer token")
        self._token = token
        self._group = group
        self._ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._secure = secure
        self.failed_logins = 0

    @property
    def token_login(self) -> bool:
        return self._token is not None

    def _sweep(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._sessions.items() if now >= s.expires]:
            del self._sessions[key]
        while len(self._sessions) > _MAX_SESSIONS:  # the oldest go first
            del self._sessions[min(self._sessions, key=lambda k: self._sessions[k].expires)]

    def _open(self, approver: Approver) -> Session:
        self._sweep()
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            approver=approver,
            expires=self._clock() + self._ttl_s,
        )
        self._sessions[session.id] = session
        return session

    def _proxied(self) -> Approver | None:
        identity = current_identity()
        if identity is None or self._group not in identity.groups:
            return None
        return Approver("proxy", identity.user)

    def session(self, request: Request) -> tuple[Session | None, bool]:
        """The operator's session for this request, and whether it is new (its cookie must be set)."""
        self._sweep()
        found = self._sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        proxied = self._proxied()
        if proxied is not None:
            if found is not None and found.approver == proxied:
                return found, False
            return self._open(proxied), True
        if found is not None and found.approver.kind == "token":
            return found, False
        return None, False  # a proxy session without the proxy's word for it is no session

    def login(self, token: str, name: str) -> Session | None:
        """A session for the holder of the operator token (``name``: who they say they are, for the audit)."""
        if self._token is None or not _equal(token, self._token):
            self.failed_logins += 1
            return None
        clean = "".join(ch for ch in name.strip() if ch.isprintable())[:64] or "unnamed"
        return self._open(Approver("token", clean))

    def logout(self, session: Session) -> None:
        self._sessions.pop(session.id, None)

    @staticmethod
    def csrf_ok(request: Request, session: Session, form: dict[str, str]) -> bool:
        return same_origin(request) and _equal(form.get("csrf", ""), session.csrf)

    def set_cookie(self, request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            session.id,
            max_age=int(self._ttl_s),
            path="/",
            httponly=True,
            samesite="strict",
            secure=self._secure_for(request),
        )

    def _secure_for(self, request: Request) -> bool:
        return request.url.scheme == "https" if self._secure is None else self._secure

    @staticmethod
    def clear_cookie(response: Response) -> None:
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")

    @staticmethod
    def login_csrf(request: Request) -> str:
        """The login form's double-submit token: the cookie's, else a fresh one (see ``set_login_cookie``)."""
        return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)

    def set_login_cookie(self, request: Request, response: Response, token: str) -> None:
        response.set_cookie(
            LOGIN_COOKIE,
            token,
            max_age=900,
            path="/console/login",
            httponly=True,
            samesite="strict",
            secure=self._secure_for(request),
        )

    @staticmethod
    def login_csrf_ok(request: Request, form: dict[str, str]) -> bool:
        return same_origin(request) and _equal(form.get("csrf", ""), request.cookies.get(LOGIN_COOKIE, ""))
