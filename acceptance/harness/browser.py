"""A real headless Chromium (Debian's ``chromium``, driven by Playwright's async API) for the password page.

Playwright's own browser download is never used (``playwright install`` needs network): the fixture
launches ``/usr/bin/chromium`` (``ops/test.sh`` installs it as root) headless, with ``--no-sandbox`` when
running as root (Chromium refuses its sandbox as root). :func:`enter_password` opens a link, reads the page,
types the password into the form and submits it, and returns what the browser saw.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from acceptance.harness import starts

__all__ = [
    "CHROMIUM",
    "PageVisit",
    "chromium",
    "chromium_unavailable_reason",
    "decide_approval",
    "enter_password",
    "operator_login",
    "visit",
]

CHROMIUM = Path("/usr/bin/chromium")
_NAV_TIMEOUT_MS = 60_000  # a ceiling: pages load in well under a second here
_LAUNCH_TIMEOUT_MS = 120_000  # Chromium's start-up on a loaded 2-core machine


def chromium_unavailable_reason() -> str | None:
    if not CHROMIUM.exists():
        return "Debian's chromium is not installed (ops/test.sh installs it as root)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright (Python) is not installed (the dev extra has it)"
    return None


@dataclass
class PageVisit:
    status: int | None
    html: str
    headers: dict[str, str] = field(default_factory=dict)
    after_status: int | None = None  # after submitting the form
    after_html: str = ""
    requests: list[str] = field(default_factory=list)  # every URL the browser fetched


@starts("browser")
@asynccontextmanager
async def chromium() -> AsyncIterator[object]:
    """A headless Chromium; skips the test when it cannot run here."""
    reason = chromium_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from playwright.async_api import async_playwright

    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=args, timeout=_LAUNCH_TIMEOUT_MS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def visit(browser: object, url: str) -> PageVisit:
    """Open ``url`` in a fresh context; nothing submitted."""
    from playwright.async_api import Browser

    assert isinstance(browser, Browser)
    context = await browser.new_context()
    try:
        page = await context.new_page()
        response = await page.goto(url, timeout=_NAV_TIMEOUT_MS)
        return PageVisit(
            status=response.status if response else None,
            html=await page.content(),
            headers=dict(response.headers) if response else {},
        )
    finally:
        await context.close()


@asynccontextmanager
async def _recording_page(browser: object) -> AsyncIterator[tuple[object, list[str]]]:
    """A page in a fresh context, and the list of every URL it fetches; the context closed after."""
    from playwright.async_api import Browser

    assert isinstance(browser, Browser)
    context = await browser.new_context()
    try:
        page = await context.new_page()
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        yield page, requests
    finally:
        await context.close()


async def _click_and_read(page: object, selector: str, result: PageVisit) -> PageVisit:
    """Click ``selector`` (a submit button) and record the page the browser is sent to in ``result``."""
    from playwright.async_api import Page

    assert isinstance(page, Page)
    async with page.expect_navigation(timeout=_NAV_TIMEOUT_MS) as navigation:
        await page.click(selector)
    after = await navigation.value
    result.after_status = after.status if after else None
    result.after_html = await page.content()
    return result


async def enter_password(browser: object, url: str, password: str) -> PageVisit:
    """Open ``url``, type ``password`` into the page's form, submit, and return both pages' HTML."""
    from playwright.async_api import Page

    async with _recording_page(browser) as (page, requests):
        assert isinstance(page, Page)
        response = await page.goto(url, timeout=_NAV_TIMEOUT_MS)
        result = PageVisit(
            status=response.status if response else None,
            html=await page.content(),
            headers=dict(response.headers) if response else {},
            requests=requests,
        )
        if result.status != 200:
            return result
        await page.fill("#password", password)
        return await _click_and_read(page, "#submit", result)


async def operator_login(page: object, url: str, token: str, name: str = "human") -> int | None:
    """Open ``url`` (a console or approval page) in ``page``; on its login form, log in with the operator
    token as ``name``. Returns the status of the page reached (the one asked for, once logged in)."""
    from playwright.async_api import Page

    assert isinstance(page, Page)
    response = await page.goto(url, timeout=_NAV_TIMEOUT_MS)
    if response is None or response.status != 401 or await page.query_selector("#token") is None:
        return response.status if response else None
    await page.fill("#token", token)
    await page.fill("#name", name)
    async with page.expect_navigation(timeout=_NAV_TIMEOUT_MS) as navigation:
        await page.click("#login")
    after = await navigation.value
    return after.status if after else None


async def decide_approval(
    browser: object,
    url: str,
    token: str,
    *,
    decision: str = "approve",
    reason: str = "",
    name: str = "human",
) -> PageVisit:
    """A human operator logs in, reads the approval page at ``url`` and clicks approve or deny (``decision``
    ``"none"``: only reads it). ``html`` is the approval page as read; ``after_*`` the answer to the click."""
    from playwright.async_api import Page

    async with _recording_page(browser) as (page, requests):
        assert isinstance(page, Page)
        status = await operator_login(page, url, token, name)
        result = PageVisit(status=status, html=await page.content(), requests=requests)
        if status != 200 or decision == "none" or await page.query_selector(f"#{decision}") is None:
            return result
        if reason:
            await page.fill("#reason", reason)
        return await _click_and_read(page, f"#{decision}", result)
