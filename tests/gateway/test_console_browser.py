"""The operator console in a real headless Chromium, against a gateway working on the real sshd.

It lists a call within a second of it finishing (server-sent events, no reload), shows a running task's
output tail and a pending approval (which appears live), reads without JavaScript, fits a phone's width,
and is served ``no-store`` under a strict CSP that loads nothing from elsewhere. The screenshots in the
documentation (docs/images/) are taken here, at desktop and phone widths.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway._dispatch import error_payload
from gateway.config import Settings
from tests.fixtures.browser import chromium, operator_login
from tests.fixtures.sshd import SshdInstance
from tests.gateway.test_approval_browser import TOKEN, approving_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def _config(sshd: SshdInstance, tmp_path: Path) -> Settings:
    return Settings.model_validate(
        {
            "state_dir": str(tmp_path / "state"),
            "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
            "targets": [
                {"name": "web-1", "host": sshd.alias("plain")},
                {"name": "prod-db", "host": sshd.alias("sudo")},
            ],
            "root": {"targets": ["prod-db"]},
            "tools": {"toolsets": ["inspect", "execute", "root", "teardown"]},
            "approvals": {"rules": [{"name": "root on prod-*", "toolsets": ["root"], "targets": ["prod-*"]}]},
        }
    )


def _no_overflow(page: Any) -> Any:
    """Nothing wider than the phone: tables scroll inside their sections, text wraps."""
    return page.evaluate(f"document.documentElement.scrollWidth <= {PHONE['width']}")


async def test_the_console_shows_calls_live_a_task_tail_and_a_pending_approval_at_desktop_and_phone_width(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    from playwright.async_api import Browser

    marker = f"TAIL-{uuid.uuid4().hex[:8]}"
    async with (
        chromium() as browser,
        approving_gateway(_config(sshd, tmp_path), principal="agent-7") as (
            client,
            rt,
        ),
    ):
        assert isinstance(browser, Browser)
        base = await rt.secret_listener.start()
        with anyio.fail_after(90):
            await client.call_tool("remote_exec", {"target": "web-1", "argv": ["uptime"]})
            task = await client.call_tool(
                "task_start",
                {
                    "target": "web-1",
                    "shell": f"for i in $(seq 1 300); do echo {marker} step $i; sleep 1; done",
                },
            )
            assert task.structured_content is not None, task
            task_id = task.structured_content["id"]
            await client.call_tool(
                "task_wait", {"task_id": task_id, "pattern": marker, "since": 0, "timeout_s": 30}
            )
            session = await client.call_tool("session_ensure", {"target": "web-1", "name": "ops-shell"})
            assert not session.is_error, session
            forward = await client.call_tool("forward_create", {"target": "web-1", "kind": "dynamic"})
            assert forward.structured_content is not None, forward
            forward_id = forward.structured_content["forward"]["id"]
        context = await browser.new_context(viewport=DESKTOP)
        page = await context.new_page()
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        assert await operator_login(page, f"{base}/console", TOKEN, name="dana") == 200
        response = await page.goto(f"{base}/console")
        assert response is not None
        headers = response.headers
        await page.wait_for_selector("#live.ok", timeout=10_000)  # the event stream is open
        tail = await page.inner_text("#tasks")
        sessions = await page.inner_text("#sessions")
        forwards = await page.inner_text("#forwards")
        rows_before = await page.evaluate("document.querySelectorAll('#calls tr').length")

        with anyio.fail_after(60):
            await client.call_tool("remote_exec", {"target": "web-1", "argv": ["df", "-h", "/"]})
        finished = time.monotonic()
        # polled from here: the page's CSP forbids the eval that wait_for_function's polling of a string uses
        with anyio.fail_after(1):
            while await page.evaluate("document.querySelectorAll('#calls tr').length") <= rows_before:  # noqa: ASYNC110 - the page's DOM
                await anyio.sleep(0.02)
        listed_after_s = time.monotonic() - finished
        newest = await page.inner_text("#calls tr:first-child")

        with anyio.fail_after(60):
            gated = await client.call_tool(
                "remote_root_exec", {"target": "prod-db", "argv": ["systemctl", "restart", "postgresql"]}
            )
        await page.wait_for_selector("#pending a[href^='/approvals/']", timeout=2000)  # live, no reload
        pending = await page.inner_text("#pending")
        IMAGES.mkdir(exist_ok=True)
        await page.screenshot(path=str(IMAGES / "console-desktop.png"), full_page=True)
        await context.close()

        phone = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        small = await phone.new_page()
        await operator_login(small, f"{base}/console", TOKEN, name="dana")
        await small.wait_for_selector("#live.ok", timeout=10_000)
        console_fits = await _no_overflow(small)
        await small.screenshot(path=str(IMAGES / "console-phone.png"), full_page=True)
        await small.click("#pending a.review")
        await small.wait_for_selector("#approve")
        approval_fits = await _no_overflow(small)
        await small.screenshot(path=str(IMAGES / "approval-phone.png"), full_page=True)
        await phone.close()

        static = await browser.new_context(viewport=DESKTOP, java_script_enabled=False)
        plain = await static.new_page()
        await operator_login(plain, f"{base}/console", TOKEN)
        without_js = await plain.inner_text("main")
        await plain.fill("#pending input[name=reason]", "not in business hours")
        async with plain.expect_navigation():
            await plain.click("#pending button.deny")  # decided on the console itself, without JavaScript
        denied_page = await plain.content()
        await static.close()
        (decided,) = rt.approvals.recent(1)
        await client.call_tool("task_cancel", {"task_id": task_id})
        await client.call_tool("session_close", {"target": "web-1", "name": "ops-shell"})
        await client.call_tool("forward_close", {"id": forward_id})

    assert listed_after_s < 1.0
    assert "remote_exec" in newest
    assert "web-1" in newest
    assert marker in tail
    assert "ops-shell" in sessions
    assert "alive" in sessions
    assert "dynamic" in forwards
    assert "active" in forwards
    assert task_id in tail
    error = error_payload(gated)
    assert error is not None
    assert error["details"]["reason"] == "approval_required"
    assert "systemctl restart postgresql" in pending
    assert "agent-7" in pending
    assert console_fits
    assert approval_fits
    for section in ("Pending approvals", "Last calls", "Running tasks", "Targets", "Sessions", "Forwards"):
        assert section in without_js
    assert marker in without_js
    assert 'id="done"' in denied_page
    assert (decided.state, decided.reason) == ("denied", "not in business hours")
    assert decided.approver is not None
    assert decided.approver.label == "operator:human"
    assert headers["cache-control"].startswith("no-store")
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "connect-src 'self'" in csp
    assert "'unsafe-inline'" not in csp
    assert all(url.startswith(base) for url in requests)  # nothing from anywhere else
    for name in ("console-desktop.png", "console-phone.png", "approval-phone.png"):
        assert (IMAGES / name).stat().st_size > 10_000
