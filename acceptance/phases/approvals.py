"""Human approvals and the operator console through the gateway over MCP/HTTP: a rule-matched
``remote_root_exec`` fails with ``approval_required`` and a link on the gateway's own listener; a real
headless Chromium logs in with the operator token (from the gateway's state directory), reads the exact
command and approves it; the retry runs as uid 0 once; a denied one is ``approval_denied`` with the reason
and never runs; the link without an operator session decides nothing; the console lists the calls, is
``no-store`` under a strict CSP and loads nothing from elsewhere.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from acceptance._mcp import error_of, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.browser import chromium, chromium_unavailable_reason, decide_approval, operator_login
from acceptance.phases._util import own_gateway_config

__all__ = ["approvals"]


def _details(result: dict[str, Any]) -> dict[str, Any]:
    return dict((error_of(result) or {}).get("details") or {})


@phase("approvals", "human approvals of risky calls and the operator console", needs=("sshd",))
async def approvals(ctx: PhaseContext) -> None:
    reason = chromium_unavailable_reason()
    if reason is not None:
        ctx.skip(reason)
    assert ctx.env.sshd is not None
    env, target = ctx.env, {"name": "prod-sudo", "host": ctx.env.sshd.alias("sudo")}
    config = own_gateway_config(
        env,
        [target],
        root={"targets": ["prod-sudo"]},
        tools={"toolsets": ["inspect", "execute", "root"]},
        approvals={"rules": [{"name": "root on prod-*", "toolsets": ["root"], "targets": ["prod-*"]}]},
    )
    marker = f"/tmp/rog-acceptance-approval-{uuid.uuid4().hex[:10]}"
    command = ["sh", "-c", f"echo ran >> {marker}; id -u"]
    async with env.extra_gateway("approvals", config) as gw, env.client_of(gw) as client:
        call = client.call
        token = (gw.state_dir / "operator-token").read_text(encoding="utf-8").strip()
        await call(
            "remote_exec", {"target": "prod-sudo", "argv": ["sh", "-c", f": > {marker}; chmod 666 {marker}"]}
        )
        ctx.created(f"marker file {marker} (the target is this machine)", lambda: not Path(marker).exists())

        async def runs() -> int:
            out = structured(await call("remote_exec", {"target": "prod-sudo", "argv": ["cat", marker]}))
            return int(out["stdout"].count("ran"))

        async with chromium() as browser:
            from playwright.async_api import Browser

            assert isinstance(browser, Browser)
            first = await call("remote_root_exec", {"target": "prod-sudo", "argv": command})
            details = _details(first)
            ctx.check(details.get("reason") == "approval_required", f"approval required: {first}")
            link = str(details.get("approval_url"))
            ctx.check(link.startswith(gw.base + "/approvals/"), f"link on the gateway's listener: {link}")
            async with httpx.AsyncClient(follow_redirects=True, timeout=30) as fetch:
                fetched = await fetch.get(link)
            ctx.check(
                fetched.status_code == 401 and marker not in fetched.text, "the link alone shows nothing"
            )
            started = time.monotonic()
            page = await decide_approval(browser, link, token, decision="approve", name="acceptance")
            ctx.check(page.status == 200 and marker in page.html, "the operator reads the exact command")
            ctx.check(page.after_status == 200, f"approved: {page.after_status}")
            second = structured(await call("remote_root_exec", {"target": "prod-sudo", "argv": command}))
            approve_to_run_ms = (time.monotonic() - started) * 1000
            ctx.check(second["stdout"].strip().endswith("0"), f"ran as root: {second}")
            ctx.check(await runs() == 1, "the approved command ran once")

            denied_argv = [*command[:2], f"echo ran >> {marker}; echo again"]
            third = await call("remote_root_exec", {"target": "prod-sudo", "argv": denied_argv})
            deny_link = str(_details(third).get("approval_url"))
            denial = await decide_approval(browser, deny_link, token, decision="deny", reason="not now")
            ctx.check(
                denial.after_status == 200, f"denied on the page: {denial.status} {denial.after_status}"
            )
            fourth = await call("remote_root_exec", {"target": "prod-sudo", "argv": denied_argv})
            got = _details(fourth)
            ctx.check(
                (got.get("reason"), got.get("reason_text")) == ("approval_denied", "not now"),
                f"denied: {fourth}",
            )
            ctx.check(await runs() == 1, "the denied command never ran")

            context = await browser.new_context()
            console = await context.new_page()
            requests: list[str] = []
            console.on("request", lambda request: requests.append(request.url))
            status = await operator_login(console, gw.base + "/console", token)
            response = await console.goto(gw.base + "/console")
            headers = response.headers if response else {}
            text = await console.inner_text("main")
            await console.wait_for_selector("#live.ok", timeout=10_000)  # the event stream is open
            rows = await console.evaluate("document.querySelectorAll('#calls tr').length")
            await call("remote_exec", {"target": "prod-sudo", "argv": ["true"]})
            finished = time.monotonic()
            await console.wait_for_function(
                f"document.querySelectorAll('#calls tr').length > {rows}", timeout=5000
            )
            listed_ms = (time.monotonic() - finished) * 1000
            await context.close()
        ctx.check(listed_ms < 1000, f"a finished call is on the console within 1 s: {listed_ms:.0f} ms")
        ctx.check(status == 200, f"console after login: {status}")
        ctx.check("remote_root_exec" in text and "approval_denied" not in text, "the console lists the calls")
        ctx.check(headers.get("cache-control", "").startswith("no-store"), f"no-store: {headers}")
        ctx.check("default-src 'none'" in headers.get("content-security-policy", ""), "strict CSP")
        ctx.check(all(url.startswith(gw.base) for url in requests), f"nothing from elsewhere: {requests}")
        await call("remote_exec", {"target": "prod-sudo", "argv": ["rm", "-f", marker]})
        ctx.check(token not in gw.stderr_text(), "the operator token is not logged")
        ctx.figures.update(
            {"approve_to_run_ms": round(approve_to_run_ms, 1), "console_listed_after_ms": round(listed_ms, 1)}
        )
