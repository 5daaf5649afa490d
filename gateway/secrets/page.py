"""The one-time password entry page: ``GET``/``POST /secret/{token}`` on the gateway's HTTP listener.

The link's 256-bit random path is the capability (no bearer token: the human's browser has none). The
page names the target and the account, posts back to itself, and is refused (410) once used, expired or
unknown -- the three look the same. Every answer carries ``Cache-Control: no-store``, a strict CSP
(``default-src 'none'``, the one inline style allowed by its hash, ``form-action 'self'``, no framing),
``Referrer-Policy: same-origin`` (the link never leaves in a Referer) and loads nothing from anywhere.
The POST needs the form's CSRF token twice, in the body and in a ``SameSite=Strict`` cookie set by the
GET (compared in constant time), and a same-origin ``Origin`` when the browser sends one. The answer
after submission never contains the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from gateway.secrets.broker import Entry, SecretBroker

__all__ = ["same_origin", "secret_routes"]

_MAX_BODY = 4096
_COOKIE = "rog_csrf"
_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222}"
    "dt{font-weight:600}dd{margin:0 0 .6rem 0;font-family:monospace}"
    "input[type=password]{width:100%;padding:.5rem;font-size:1rem;box-sizing:border-box}"
    "button{margin-top:1rem;padding:.5rem 1.2rem;font-size:1rem}.note{color:#555;font-size:.9rem}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
_CSP = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Cache-Control": "no-store, max-age=0",
    "Pragma": "no-cache",
    "Content-Security-Policy": _CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send `Origin: null` on the POST
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def _gone() -> HTMLResponse:
    return _page(
        "Link no longer valid",
        "<p>This password entry link has expired, was already used, or never existed. "
        "Ask the agent to retry; the gateway makes a fresh link.</p>",
        status=410,
    )


def _form(entry: Entry) -> HTMLResponse:
    e = html.escape
    what = "sudo" if entry.provider == "sudo_password" else "su"
    body = (
        f"<p>The remoteops gateway needs a password to run a command as root ({e(what)}).</p>"
        f"<dl><dt>Target</dt><dd id=target>{e(entry.target)}</dd>"
        f"<dt>Account whose password is asked</dt><dd id=account>{e(entry.account)}</dd>"
        f"<dt>Logged in as</dt><dd>{e(entry.login)}</dd></dl>"
        '<form method="post" autocomplete="off">'
        f'<input type="hidden" name="csrf" value="{e(entry.csrf)}">'
        '<label for="password">Password</label>'
        '<input type="password" id="password" name="password" required autofocus autocomplete="off">'
        '<button type="submit" id="submit">Use once</button></form>'
        '<p class="note">Single use, valid for about two minutes. The password is kept in the gateway\'s '
        "memory for one command only; it is never shown to the agent or the model, logged or stored.</p>"
    )
    response = _page("Enter password for root access", body)
    response.set_cookie(
        _COOKIE,
        entry.csrf,
        max_age=600,
        path=f"/secret/{entry.token}",
        httponly=True,
        samesite="strict",
    )
    return response


def same_origin(request: Request) -> bool:
    """A form post from this very origin (no ``Origin``: a client without cross-site context)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True  # browsers send Origin on form posts; a client without it has no cross-site context
    host = request.headers.get("host", "")
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == host


def secret_routes(broker: SecretBroker) -> list[Route]:
    async def show(request: Request) -> Response:
        entry = broker.entry(request.path_params["token"])
        return _gone() if entry is None else _form(entry)

    async def submit(request: Request) -> Response:
        entry = broker.entry(request.path_params["token"])
        if entry is None:
            return _gone()
        if not same_origin(request):
            return _page("Refused", "<p>Cross-origin submission refused.</p>", status=403)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return _page("Refused", "<p>Unsupported form encoding.</p>", status=415)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_BODY:
                return _page("Refused", "<p>Too large.</p>", status=413)
        try:
            form = parse_qs(
                body.decode("utf-8"), keep_blank_values=True, max_num_fields=4, strict_parsing=False
            )
        except (UnicodeDecodeError, ValueError):
            return _page("Refused", "<p>Malformed form.</p>", status=400)
        finally:
            for index in range(len(body)):
                body[index] = 0
        csrf = (form.get("csrf") or [""])[0]
        cookie = request.cookies.get(_COOKIE, "")
        good = hmac.compare_digest(csrf.encode(), entry.csrf.encode()) and hmac.compare_digest(
            cookie.encode(), entry.csrf.encode()
        )
        if not good:
            return _page("Refused", "<p>The form's security token did not match. Reload the link.</p>", 403)
        password = (form.get("password") or [""])[0]
        form.clear()
        if not broker.acceptable(password):
            return _page(
                "Refused", "<p>Empty, too long, or containing a line break. Reload the link.</p>", 400
            )
        claimed = broker.submit(entry, password)
        del password
        if not claimed:  # another submission used the link up (or it expired) while this body arrived
            return _gone()
        return _page(
            "Received",
            "<p id=done>Thank you. The gateway will use the password once, for this request only; "
            "you can close this page.</p>",
        )

    return [
        Route("/secret/{token}", show, methods=["GET"]),
        Route("/secret/{token}", submit, methods=["POST"]),
    ]
