"""The console's routes on the gateway's HTTP listener (or the loopback listener of a stdio gateway).

* ``GET /console`` — the overview (``gateway.console.views``); ``GET /console/events`` — its live
  updates (server-sent events, ``gateway.console.feed``); ``GET /console/fragment/approvals`` — the
  pending list alone, for those updates.
* ``GET``/``POST /console/login`` — the operator token form; ``POST /console/logout``.
* ``GET /approvals/{id}`` — one approval: exactly what would run, and the approve / deny form;
  ``POST /approvals/{id}`` — the decision (operator session, CSRF token, same origin, the digest of the
  request the page showed). Refused: no operator (401, nothing about the call shown), bad CSRF or
  origin (403), the caller deciding its own call (403), the page showed another request (409), decided
  or expired (410). Each decision leaves an ``approval_decision`` audit record (caller and approver).

Every answer is ``no-store`` with the strict CSP of ``gateway.console.html``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway._errors import ConfigError
from gateway._runtime import Runtime
from gateway.approvals.hub import Decision
from gateway.console.auth import OperatorAuth, Session, read_form
from gateway.console.feed import Feed
from gateway.console.html import HEADERS, e, page
from gateway.console.views import approval_detail, decision_form, overview, pending_table

__all__ = ["console_routes", "operator_auth"]

_MAX_REASON = 500
Handler = Callable[[Request, Session], Awaitable[Response]]


def _next_path(value: str) -> str:
    """Only a path on this site (never ``//host`` or a scheme)."""
    return value if value.startswith("/") and not value.startswith("//") and "\\" not in value else "/console"


def _login_page(auth: OperatorAuth, request: Request, *, status: int = 401, note: str = "") -> Response:
    if not auth.token_login:
        body = (
            "<p>Operator login is needed. This gateway has no operator token; operators come through the "
            "trusted proxy with the operator group.</p>"
        )
        return page("Operator login", body, status=status)
    token = auth.login_csrf(request)
    target = _next_path(request.query_params.get("next", request.url.path))
    body = (
        (f'<p class="bad" id="login-error">{e(note)}</p>' if note else "")
        + "<p>Only a human operator may see and decide what the agents do. Enter the operator token "
        "(from the gateway host's operator token file).</p>"
        f'<form method="post" action="/console/login?next={e(quote(target, safe="/"))}" autocomplete="off">'
        f'<input type="hidden" name="csrf" value="{e(token)}">'
        '<div class="actions"><label>Operator token<input type="password" name="token" id="token" required>'
        '</label><label>Your name (for the audit)<input type="text" name="name" id="name" maxlength="64">'
        '</label><button type="submit" id="login">Log in</button></div></form>'
    )
    response = page("Operator login", body, status=status)
    auth.set_login_cookie(request, response, token)
    return response


def operator_auth(
    rt: Runtime, operator_token: str | None, *, bearer_token: str | None = None
) -> OperatorAuth:
    """The console's operators for this runtime: ``operator_token`` (None: only the trusted proxy's
    operator group), never equal to ``bearer_token``."""
    cfg = rt.settings.console
    try:
        return OperatorAuth(
            operator_token,
            group=cfg.operator_group,
            ttl_s=cfg.session_ttl_s,
            forbidden=(bearer_token or "",),
            secure=cfg.secure_cookies,
        )
    except ValueError as exc:
        raise ConfigError(str(exc), key="console.operator_token_file") from None


def console_routes(rt: Runtime, auth: OperatorAuth) -> list[Route]:
    """The routes; the feed is subscribed to the runtime's audit log and approvals here."""
    feed = Feed(rt.settings.console.recent_calls)
    rt.audit.add_listener(feed.on_call)
    rt.approvals.add_listener(feed.on_approval)
    rt.on_stop(feed.stop)

    def operator_only(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session, new = auth.session(request)
            if session is None:
                return _login_page(auth, request)
            response = await handler(request, session)
            if new:
                auth.set_cookie(request, response, session)
            return response

        return endpoint

    def framed(
        request: Request, session: Session, title: str, body: str, *, status: int = 200, live: bool = False
    ) -> HTMLResponse:
        who = session.approver.label
        return page(title, body, status=status, operator=who, csrf=session.csrf, live=live)

    def refused(request: Request, session: Session, text: str, status: int) -> HTMLResponse:
        return framed(
            request, session, "refused", f'<p class="bad" id="refused">{e(text)}</p>', status=status
        )

    async def home(request: Request, session: Session) -> Response:
        return framed(
            request,
            session,
            "overview",
            await overview(rt, feed.recent(), session.approver, session.csrf),
            live=True,
        )

    async def fragment(request: Request, session: Session) -> Response:
        return HTMLResponse(pending_table(rt, session.approver, session.csrf), headers=dict(HEADERS))

    async def events(request: Request, session: Session) -> Response:
        headers = {**HEADERS, "X-Accel-Buffering": "no"}
        return StreamingResponse(feed.events(), media_type="text/event-stream", headers=headers)

    async def login_form(request: Request) -> Response:
        session, _ = auth.session(request)
        if session is not None:
            return RedirectResponse(_next_path(request.query_params.get("next", "/console")), 303)
        return _login_page(auth, request, status=200)

    async def login(request: Request) -> Response:
        form = await read_form(request)
        if form is None or not auth.login_csrf_ok(request, form):
            return _login_page(auth, request, status=403, note="The form expired; try again.")
        session = auth.login(form.get("token", ""), form.get("name", ""))
        if session is None:
            return _login_page(auth, request, status=401, note="That is not the operator token.")
        response = RedirectResponse(_next_path(request.query_params.get("next", "/console")), 303)
        auth.set_cookie(request, response, session)
        return response

    async def logout(request: Request, session: Session) -> Response:
        form = await read_form(request)
        if form is None or not auth.csrf_ok(request, session, form):
            return refused(request, session, "Refused: the form's token did not match.", 403)
        auth.logout(session)
        response = RedirectResponse("/console/login", 303)
        auth.clear_cookie(response)
        return response

    async def show(request: Request, session: Session) -> Response:
        approval = rt.approvals.get(request.path_params["approval_id"])
        if approval is None:
            return framed(request, session, "approval", "<p>No such approval (or long gone).</p>", status=404)
        body = approval_detail(approval)
        if approval.state != "pending":
            who = approval.approver.label if approval.approver else "—"
            body = (
                f'<p id="state">This request is <b>{e(approval.state)}</b> (by {e(who)}'
                + (f": {e(approval.reason)}" if approval.reason else "")
                + ").</p>"
                + body
            )
        elif session.approver.is_caller(approval.caller):
            body = '<p class="bad" id="own">You made this call: another operator must decide it.</p>' + body
        else:
            body += (
                decision_form(approval, session.csrf)
                .replace('class="approve"', 'class="approve" id="approve"')
                .replace('class="deny"', 'class="deny" id="deny"')
                .replace('name="reason"', 'name="reason" id="reason"')
            )
        return framed(request, session, "approval", body)

    async def decide(request: Request, session: Session) -> Response:
        approval = rt.approvals.get(request.path_params["approval_id"])
        if approval is None:
            return framed(request, session, "approval", "<p>No such approval.</p>", status=404)
        form = await read_form(request)
        if form is None or not auth.csrf_ok(request, session, form):
            return refused(request, session, "Refused: the form's token did not match.", 403)
        answer = form.get("decision")
        if answer not in ("approve", "deny"):
            return refused(request, session, "Refused: approve or deny.", 400)
        decision: Decision = "approve" if answer == "approve" else "deny"
        reason = form.get("reason", "").strip()[:_MAX_REASON]
        refusal = rt.approvals.decide(approval, session.approver, decision, reason, form.get("digest", ""))
        if refusal is not None:
            status, text = {
                "gone": (410, "This request was already decided or has expired."),
                "altered": (
                    409,
                    "The request changed after this page showed it: reload and review it again.",
                ),
                "own_call": (403, "You made this call: another operator must decide it."),
            }[refusal]
            return refused(request, session, text, status)
        rt.audit.approval_decision(
            {
                "approval_id": approval.id,
                "decision": approval.state,
                "caller": {"label": approval.caller.label, **approval.caller.audit_fields()},
                "approver": session.approver.audit_fields(),
                "reason": reason,
                "tool": approval.shown.tool,
                "target": approval.shown.target,
                "rule": approval.shown.rule,
                "digest": approval.shown.digest,
            }
        )
        word = "Approved" if decision == "approve" else "Denied"
        effect = "runs now" if decision == "approve" else "is refused"
        body = f'<p id="done">{word}: the waiting call {effect}.</p>'
        return framed(request, session, word.lower(), body + approval_detail(approval))

    return [
        Route("/console", operator_only(home), methods=["GET"]),
        Route("/console/events", operator_only(events), methods=["GET"]),
        Route("/console/fragment/approvals", operator_only(fragment), methods=["GET"]),
        Route("/console/login", login_form, methods=["GET"]),
        Route("/console/login", login, methods=["POST"]),
        Route("/console/logout", operator_only(logout), methods=["POST"]),
        Route("/approvals/{approval_id}", operator_only(show), methods=["GET"]),
        Route("/approvals/{approval_id}", operator_only(decide), methods=["POST"]),
    ]
