"""``serve --stdio`` (the gateway as its client's subprocess, no HTTP listener): the password page is
served by the loopback-only listener the gateway opens for it on first need, and the link-in-error flow
works end to end with a real headless Chromium, real sshd and real sudo."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from gateway._dispatch import error_payload
from tests.fixtures.browser import chromium, enter_password
from tests.fixtures.gateway_proc import write_config
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.sshd]


async def test_stdio_gateway_serves_the_page_on_a_loopback_listener_and_the_retry_runs_as_root(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    control = Path(tempfile.mkdtemp(prefix="rogs-", dir="/tmp"))
    config = {
        "state_dir": str(tmp_path / "state"),
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(control)},
        "targets": [{"name": "pass", "host": sshd.alias("pass")}],
        "root": {"targets": ["pass"], "providers": ["sudo_password"]},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
    }
    cfg = write_config(tmp_path / "gateway.toml", config)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(cfg), "serve", "--stdio"]
    )
    try:
        async with chromium() as browser, Client(params, mode="legacy") as client:
            args = {"target": "pass", "argv": ["id", "-u"]}
            with anyio.fail_after(90):
                first = await client.call_tool("remote_root_exec", args)
            error = error_payload(first)
            assert error is not None
            assert error["details"]["reason"] == "secret_required"
            link = error["details"]["entry"]
            assert link.startswith("http://127.0.0.1:")
            page = await enter_password(browser, link, sshd.pass_password)
            with anyio.fail_after(90):
                second = await client.call_tool("remote_root_exec", args)
    finally:
        shutil.rmtree(control, ignore_errors=True)
    assert page.after_status == 200
    assert not second.is_error, second
    assert second.structured_content is not None
    assert second.structured_content["stdout"].strip() == "0"
