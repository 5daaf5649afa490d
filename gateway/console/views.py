"""The console's sections, rendered on the server from the objects the tools use (every text escaped).

Pending approvals (with links to their pages), the last decisions, the last calls, running tasks with
the tail of their output, sessions, forwards, per-target transport and agent state, upstream health.
Reads that reach a target (task tails, target resolution) are bounded; a failure shows as text.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import anyio

from gateway._runtime import Runtime
from gateway.approvals.hub import Approval, Approver
from gateway.console.html import e
from remoteops import RemoteOpsError

__all__ = ["approval_detail", "decision_form", "overview", "pending_table"]

_TAILS = 10
_TAIL_S = 3.0
_TARGETS_S = 5.0


def _table(head: list[str], rows: list[list[str]], body_id: str = "", narrow: tuple[int, ...] = ()) -> str:
    def cell(tag: str, index: int, text: str) -> str:
        cls = ' class="hide-narrow"' if index in narrow else ""
        return f"<{tag}{cls}>{text}</{tag}>"

    ths = "".join(cell("th", i, e(h)) for i, h in enumerate(head))
    trs = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows)
    tbody = f'<tbody id="{body_id}">' if body_id else "<tbody>"
    return f'<div class="scroll"><table><thead><tr>{ths}</tr></thead>{tbody}{trs}</tbody></table></div>'


def _when(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")


def _what(approval: Approval) -> str:
    args = approval.shown.arguments
    for key in ("argv", "shell", "path", "remote_path", "source"):
        if args.get(key):
            value = args[key]
            return " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return ""


def decision_form(approval: Approval, csrf: str, *, ids: bool = False) -> str:
    """Approve / deny, with an optional reason: posts the digest of the request shown with it. ``ids``: the
    approval page's own form (element ids for the one form on the page)."""

    def named(element: str) -> str:
        return f' id="{element}"' if ids else ""

    return (
        f'<form method="post" action="/approvals/{e(approval.id)}" autocomplete="off">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">'
        f'<input type="hidden" name="digest" value="{e(approval.shown.digest)}">'
        '<div class="actions"><label>Reason (optional)'
        f'<input type="text" name="reason"{named("reason")} maxlength="500"></label>'
        f'<button type="submit" name="decision" value="approve" class="approve"{named("approve")}>'
        "Approve</button>"
        f'<button type="submit" name="decision" value="deny" class="deny"{named("deny")}>Deny</button>'
        "</div></form>"
    )


def pending_table(rt: Runtime, approver: Approver, csrf: str) -> str:
    """The pending approvals, one card each with every argument (and the change) folded in and the
    decision form (none on the approver's own calls); also served alone, for the live update."""
    now = time.monotonic()
    pending = rt.approvals.pending()
    if not pending:
        return '<p class="muted" id="no-pending">No call is waiting for approval.</p>'
    cards = []
    for a in pending:
        own = approver.is_caller(a.caller)
        decide = '<p class="bad">You made this call: another operator decides it.</p>' if own else ""
        cards.append(
            f'<div class="card" id="card-{e(a.id)}">'
            f"<p><b>{e(a.shown.tool)}</b> on <b>{e(a.shown.target or '—')}</b>"
            f' <span class="muted">asked by</span> <span class="mono">{e(a.caller.label)}</span></p>'
            f'<p><code>{e(_what(a))}</code></p><p class="muted">{e(a.shown.rule)} · expires in '
            f'{max(0, a.expires - now):.0f} s · <a class="review" href="/approvals/{e(a.id)}">review</a></p>'
            f"<details><summary>every argument{' and the change' if a.diff else ''}</summary>"
            f"{approval_detail(a)}</details>{decide or decision_form(a, csrf)}</div>"
        )
    return "".join(cards)


def _decided(rt: Runtime) -> str:
    recent = rt.approvals.recent(10)
    if not recent:
        return '<p class="muted">No decisions yet.</p>'
    rows = [
        [
            e(a.decided_at or a.created_at),
            e(a.shown.tool),
            e(a.shown.target or "—"),
            e(a.caller.label),
            f'<span class="{"ok" if a.state in ("approved", "used") else "bad"}">{e(a.state)}</span>',
            e(a.approver.label if a.approver else "—"),
            e(a.reason),
        ]
        for a in recent
    ]
    return _table(["decided", "tool", "target", "caller", "state", "approver", "reason"], rows, narrow=(0, 6))


def _calls(recent: list[dict[str, Any]]) -> str:
    rows = [
        [
            e(c.get("time")),
            e(c.get("tool")),
            e(c.get("principal")),
            e(c.get("target")),
            f'<span class="{"ok" if c.get("outcome") == "ok" else "bad"}">{e(c.get("outcome"))}</span>',
            e(c.get("error_code")),
            e(c.get("duration_ms")),
        ]
        for c in recent
    ]
    head = ["time", "tool", "principal", "target", "outcome", "error code", "ms"]
    return _table(head, rows, body_id="calls", narrow=(0,))


async def _tail(rt: Runtime, task_id: str) -> str:
    try:
        with anyio.fail_after(_TAIL_S):
            out = await rt.tasks.output(task_id, tail=True, max_bytes=rt.settings.console.task_tail_bytes)
    except TimeoutError:
        return "(output not read in time)"
    except RemoteOpsError as exc:
        return f"(output not readable: {type(exc).__name__})"
    return out.data


async def _tasks(rt: Runtime) -> str:
    listed, _ = rt.tasks.list_tasks()
    live = [task for task in listed if task.state in ("starting", "running")]
    running, count = live[:_TAILS], len(live)
    if not running:
        return '<p class="muted">No task is running.</p>'
    parts = []
    for task in running:
        command = " ".join(task.argv) if task.argv else task.shell or ""
        tail = rt.redactor.text(await _tail(rt, task.id))
        parts.append(
            f'<div class="task" id="task-{e(task.id)}"><p><span class="badge">{e(task.state)}</span> '
            f'<span class="mono">{e(task.id)}</span> on <b>{e(task.target)}</b> since '
            f"{e(_when(task.started_at or task.created_at))}: <code>{e(command)}</code></p>"
            f'<pre class="tail">{e(tail) or "(no output yet)"}</pre></div>'
        )
    more = f'<p class="muted">{count - len(running)} more running.</p>' if count > len(running) else ""
    return "".join(parts) + more


def _sessions(rt: Runtime) -> str:
    sessions, _ = rt.sessions.list_sessions(limit=20)
    if not sessions:
        return '<p class="muted">No session.</p>'
    rows = [[e(s.target), e(s.name), e(s.state), e(s.cwd), e(_when(s.last_seen_at))] for s in sessions]
    return _table(["target", "name", "state", "cwd", "last seen"], rows, narrow=(3,))


async def _forwards(rt: Runtime) -> str:
    forwards = await rt.forwards.list()
    if not forwards:
        return '<p class="muted">No forward.</p>'
    rows = [
        [
            e(f.target),
            e(f.kind),
            e(f"{f.bind_address}:{f.bind_port}"),
            e(f"{f.dest_host}:{f.dest_port}" if f.dest_host else ""),
            f'<span class="{"ok" if f.state == "active" else "bad"}">{e(f.state)}</span>',
        ]
        for f in forwards
    ]
    return _table(["target", "kind", "bind", "destination", "state"], rows)


async def _targets(rt: Runtime) -> str:
    stats = rt.remote.stats()
    alive: dict[str, bool] = {}
    with anyio.move_on_after(_TARGETS_S):
        alive = {t.name: t.multiplex.master_alive for t in await rt.remote.list_targets()}
    rows = []
    for spec in rt.settings.targets:
        carrier = stats.carriers.get(spec.name)
        rows.append(
            [
                e(spec.name),
                e("up" if alive.get(spec.name) else "down" if spec.name in alive else "?"),
                e(carrier.carrier if carrier else None),
                e(("alive pid " + str(carrier.agent_pid)) if carrier and carrier.agent_alive else "—"),
                e(carrier.requests_in_flight if carrier else 0),
                e(carrier.reason if carrier else ""),
            ]
        )
    if not rows:
        return '<p class="muted">No target is configured.</p>'
    table = _table(["target", "master", "carrier", "agent", "in flight", "note"], rows, narrow=(5,))
    return table + (
        f'<p class="muted">masters created {stats.masters_created}, reused {stats.masters_reused}, '
        f"runs {stats.runs}, fallbacks {stats.fallbacks}</p>"
    )


def _upstreams(rt: Runtime) -> str:
    health = rt.redactor.any(rt.relay.health())
    if not health:
        return '<p class="muted">No upstream is configured.</p>'
    rows = [
        [
            e(u.get("name")),
            e(u.get("state")),
            e(u.get("transport")),
            e(u.get("relayed_tools")),
            e(u.get("last_error")),
        ]
        for u in health
    ]
    return _table(["upstream", "state", "transport", "tools", "last error"], rows, narrow=(4,))


def _section(title: str, inner: str, section_id: str) -> str:
    return f'<section id="{section_id}"><h2>{e(title)}</h2>{inner}</section>'


async def overview(rt: Runtime, recent: list[dict[str, Any]], approver: Approver, csrf: str) -> str:
    audit = rt.audit.status()
    health = f"audit {'ok' if audit['healthy'] else 'FAILING: ' + str(audit['last_error'])}"
    return "".join(
        [
            _section(
                "Pending approvals",
                f'<div id="pending">{pending_table(rt, approver, csrf)}</div>',
                "approvals",
            ),
            _section("Last calls", _calls(recent), "recent"),
            _section("Running tasks", await _tasks(rt), "tasks"),
            _section("Targets", await _targets(rt), "targets"),
            _section("Sessions", _sessions(rt), "sessions"),
            _section("Forwards", await _forwards(rt), "forwards"),
            _section("Upstreams", _upstreams(rt), "upstreams"),
            _section("Decisions", _decided(rt), "decisions"),
            f'<p class="muted">{e(health)}; gateway {e(rt.identity.version)}, pid {rt.identity.pid}</p>',
        ]
    )


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        cls = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
        lines.append(f'<span class="{cls}">{e(line)}</span>' if cls else e(line))
    return '<pre class="diff" id="diff">' + "\n".join(lines) + "</pre>"


def approval_detail(approval: Approval) -> str:
    """Exactly what will run: tool, target, caller, rule, every argument (and the diff of a write)."""
    shown = approval.shown
    args = dict(shown.arguments)
    fields = [
        ("Tool", f'<span class="mono" id="tool">{e(shown.tool)}</span> ({e(shown.toolset)})'),
        ("Target", f'<span class="mono" id="target">{e(shown.target or "—")}</span>'),
        ("Asked by", f'<span class="mono" id="caller">{e(approval.caller.label)}</span>'),
        *(
            [("Selected targets", f'<span class="mono" id="targets">{e(", ".join(approval.targets))}</span>')]
            if approval.targets
            else []
        ),
        ("Rule", e(shown.rule)),
    ]
    if isinstance(args.get("argv"), list):
        fields.append(("Command (argv)", f'<code id="argv">{e(json.dumps(args["argv"]))}</code>'))
    elif args.get("shell"):
        fields.append(("Shell", f'<code id="argv">{e(args["shell"])}</code>'))
    for key in ("path", "remote_path", "source", "destination"):
        if args.get(key):
            fields.append((key, f'<code class="path">{e(args[key])}</code>'))
    dl = "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in fields)
    body = f"<dl>{dl}</dl>"
    if approval.diff:
        body += "<h2>Change</h2>" + _diff_html(approval.diff)
    body += (
        "<h2>All arguments</h2>"
        f'<pre id="arguments">{e(json.dumps(args, indent=2, ensure_ascii=False))}</pre>'
        f'<p class="muted">Request digest (SHA-256) <span class="mono" id="digest">{e(shown.digest)}</span>'
        " — re-checked before it runs.</p>"
    )
    return body
