"""``serve --stdio`` with approval rules: the approval page and the console are served by the loopback-only
listener the gateway opens on first need; the operator logs in with the operator token the gateway made in
its state directory, approves in a real headless Chromium, and the retry runs as root on the real sshd."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from gateway._dispatch import error_payload
from tests.fixtures.browser import chromium, decide_approval
from tests.fixtures.gateway_proc import write_config
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.sshd]


async def test_a_stdio_gateway_serves_the_approval_page_on_its_loopback_listener(
    sshd: SshdInstance, tmp_path: Path
) -> None:
    control = Path(tempfile.mkdtemp(prefix="roga-", dir="/tmp"))
    state = tmp_path / "state"
    config = {
        "state_dir": str(state),
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(control)},
        "targets": [{"name": "sudo", "host": sshd.alias("sudo")}],
        "root": {"targets": ["sudo"]},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
        "approvals": {"rules": [{"name": "every root call", "toolsets": ["root"]}]},
    }
    cfg = write_config(tmp_path / "gateway.toml", config)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(cfg), "serve", "--stdio"]
    )
    args = {"target": "sudo", "argv": ["id", "-u"]}
    try:
        async with chromium() as browser, Client(params, mode="legacy") as client:
            with anyio.fail_after(90):
                first = error_payload(await client.call_tool("remote_root_exec", args))
            assert first is not None
            link = first["details"]["approval_url"]
            token = (state / "operator-token").read_text(encoding="utf-8").strip()
            page = await decide_approval(browser, link, token, decision="approve")
            with anyio.fail_after(90):
                second = await client.call_tool("remote_root_exec", args)
        mode = (state / "operator-token").stat().st_mode & 0o777
    finally:
        shutil.rmtree(control, ignore_errors=True)
    assert first["details"]["reason"] == "approval_required"
    assert link.startswith("http://127.0.0.1:")
    assert page.status == 200
    assert page.after_status == 200
    assert not second.is_error, second
    assert second.structured_content is not None
    assert second.structured_content["stdout"].strip() == "0"
    assert mode == 0o600
