"""The console's HTML frame: one inline style and one inline script, both allowed by their hashes.

Every answer carries ``Cache-Control: no-store``, a strict CSP (``default-src 'none'``; the style and
the script by hash; ``connect-src 'self'`` for the live updates; ``form-action 'self'``; no framing,
no ``<base>``), ``Referrer-Policy: same-origin`` and ``nosniff``. Nothing is loaded from anywhere; the
pages read without JavaScript (the script only adds the live updates) and fit a phone's width.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Mapping

from starlette.responses import HTMLResponse

__all__ = ["HEADERS", "STYLE", "e", "page"]

STYLE = (
    "*{box-sizing:border-box}body{font-family:system-ui,sans-serif;margin:0;color:#1d1d1f;background:#f6f6f7}"
    "header{background:#1d2a3a;color:#fff;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:.4rem 1rem;"
    "align-items:center}header h1{font-size:1.1rem;margin:0;flex:1}header a,header button{color:#fff}"
    "header form{margin:0}header button{background:none;border:1px solid #fff6;border-radius:4px;"
    "padding:.2rem .6rem;font-size:.85rem}"
    "main{max-width:72rem;margin:0 auto;padding:.5rem 1rem 2rem}"
    "section{background:#fff;border:1px solid #ddd;border-radius:6px;margin:1rem 0;padding:.4rem .8rem}"
    "h2{font-size:1rem;margin:.4rem 0}table{border-collapse:collapse;width:100%;font-size:.85rem}"
    "th,td{text-align:left;padding:.25rem .4rem;border-bottom:1px solid #eee;vertical-align:top;"
    "overflow-wrap:break-word}th{font-weight:600;color:#555;white-space:nowrap}"
    ".scroll{overflow-x:auto}code,pre,.mono{font-family:ui-monospace,monospace;font-size:.82rem}"
    "code,.mono{overflow-wrap:anywhere}#digest{word-break:break-all}"
    "pre{background:#f3f3f5;padding:.5rem;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere;"
    "margin:.3rem 0}.ok{color:#176b2c}.bad{color:#a3141c}.warn{color:#8a5a00}.muted{color:#666}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem .8rem;margin:.4rem 0}"
    "dt{font-weight:600}dd{margin:0;overflow-wrap:anywhere}"
    ".actions{display:flex;flex-wrap:wrap;gap:.6rem;align-items:flex-end;margin:.6rem 0}"
    ".actions label{flex:1 1 14rem}input[type=text],input[type=password]{width:100%;padding:.45rem;"
    "font-size:1rem}button{padding:.45rem 1.1rem;font-size:1rem;border-radius:4px;border:1px solid #888;"
    "cursor:pointer}button.approve{background:#176b2c;color:#fff;border-color:#176b2c}"
    "button.deny{background:#a3141c;color:#fff;border-color:#a3141c}"
    ".diff .add{color:#176b2c}.diff .del{color:#a3141c}.badge{display:inline-block;padding:0 .4rem;"
    "border-radius:3px;background:#eee;font-size:.8rem}#live{font-size:.8rem}"
    ".card{border-left:4px solid #8a5a00;background:#fffaf0;padding:.1rem .6rem;margin:.4rem 0}"
    ".card p{margin:.3rem 0}a.review{font-weight:600}"
    "@media (max-width:40rem){main{padding:.3rem .5rem}dl{grid-template-columns:1fr}header h1{font-size:1rem}"
    ".hide-narrow{display:none}"
    "th,td{padding:.2rem .25rem}}"
)

SCRIPT = (
    "(function(){var s=document.getElementById('live');if(!window.EventSource||!s)return;"
    "var es=new EventSource('/console/events');"
    "es.addEventListener('open',function(){s.textContent='live';s.className='ok';});"
    "es.addEventListener('error',function(){s.textContent='reconnecting';s.className='warn';});"
    "es.addEventListener('call',function(m){var d=JSON.parse(m.data),b=document.getElementById('calls');"
    "if(!b)return;var r=document.createElement('tr');r.id='call-'+d.request_id;"
    "['time','tool','principal','target','outcome','error_code','duration_ms'].forEach(function(k){"
    "var c=document.createElement('td');c.textContent=d[k]==null?'':String(d[k]);"
    "if(k==='outcome')c.className=d.outcome==='ok'?'ok':'bad';if(k==='time')c.className='hide-narrow';"
    "r.appendChild(c);});b.insertBefore(r,b.firstChild);while(b.children.length>200)b.removeChild(b.lastChild);});"
    "es.addEventListener('approvals',function(){fetch('/console/fragment/approvals',"
    "{credentials:'same-origin'}).then(function(r){return r.ok?r.text():null}).then(function(t){"
    "var p=document.getElementById('pending');if(t!==null&&p)p.innerHTML=t;});});})();"
)


def _hash(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


CSP = (
    f"default-src 'none'; style-src 'sha256-{_hash(STYLE)}'; script-src 'sha256-{_hash(SCRIPT)}'; "
    "connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-store, max-age=0",
    "Pragma": "no-cache",
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def e(value: object) -> str:
    """HTML-escaped text of ``value`` (None: empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def page(
    title: str,
    body: str,
    *,
    status: int = 200,
    operator: str | None = None,
    csrf: str = "",
    live: bool = False,
) -> HTMLResponse:
    """A whole page: header (the operator and a log-out form when logged in), ``body``, the live script."""
    who = ""
    if operator is not None:
        who = (
            f'<span class="mono">{e(operator)}</span>'
            '<form method="post" action="/console/logout">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            '<button type="submit">Log out</button></form>'
        )
    status_line = '<span id="live" class="muted">static</span>' if live else ""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>"
        f'<header><h1><a href="/console">remoteops console</a> — {e(title)}</h1>{status_line}{who}</header>'
        f"<main>{body}</main>" + (f"<script>{SCRIPT}</script>" if live else "") + "</body></html>"
    )
    return HTMLResponse(text, status_code=status, headers=dict(HEADERS))
