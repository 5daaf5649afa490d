"""The real gateway process over HTTP with root enabled, against the real sshd and real sudo:

* a planted password (ro-pass's sudo password) entered on the page the gateway serves on its own HTTP
  listener is searched for in everything the gateway and the target leave behind -- the gateway's log
  (stderr, debug level), every file under its state directory (audit log, token, state records), every
  tool result, the page's HTML after submission, and the target's whole process list (every argv, every
  environment) captured by the root command itself while the sudo that started it waits: zero occurrences;
* the MCP Inspector CLI (the TypeScript client) calls ``remote_root_exec``: a success, and failures
  (outside the root allow-list; a password nobody entered yet, whose message carries the link).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway._dispatch import error_payload
from tests.fixtures.browser import chromium, enter_password
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ToolRun, ensure_tool
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.slow, pytest.mark.sshd]

CLIENT_TIMEOUT_S = 90.0
# Runs as root under the sudo that waits for it: every process's argv and environment on the target, into
# the file "$1" (whole: a busy machine's list is larger than the result's output cap, whose head and tail
# alone could miss the sudo line); stdout gets the sudo lines and the file's size.
CAPTURE = (
    'ps -eww -o pid,user,args > "$1"; '
    "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\0' ' ' < $f 2>/dev/null; echo; done "
    '>> "$1"; '
    'grep -F "sudo -S -p" "$1"; wc -c < "$1"'
)


@pytest.fixture(scope="module")
def root_gateway(sshd: SshdInstance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    control = Path(tempfile.mkdtemp(prefix="rogr-", dir="/tmp"))  # short: ControlPath limit
    config = {
        "log_level": "debug",
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(control)},
        "targets": [{"name": role, "host": sshd.alias(role)} for role in ("plain", "sudo", "pass")],
        "root": {"targets": ["sudo", "pass"]},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
    }
    try:
        with run_gateway(tmp_path_factory.mktemp("gw-root"), config) as gw:
            yield gw
    finally:
        shutil.rmtree(control, ignore_errors=True)


@pytest.mark.anyio
async def test_a_planted_password_appears_nowhere_the_gateway_or_the_target_leaves_anything(
    sshd: SshdInstance, root_gateway: GatewayProcess, tmp_path: Path
) -> None:
    planted = sshd.pass_password
    gw = root_gateway
    capture_file = tmp_path / "processes.txt"  # the target is this machine: the test reads what root wrote
    results: list[dict[str, Any]] = []
    http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(CLIENT_TIMEOUT_S))
    async with (
        chromium() as browser,
        http,
        Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client,
    ):
        args = {"target": "pass", "argv": ["sh", "-c", CAPTURE, "sh", str(capture_file)], "timeout_s": 30}
        with anyio.fail_after(CLIENT_TIMEOUT_S):
            first = await client.call_tool("remote_root_exec", args)
        results.append(first.model_dump(mode="json"))
        error = error_payload(first)
        assert error is not None
        assert error["code"] == "privilege_error"
        link = error["details"]["entry"]
        assert link.startswith(gw.base + "/secret/")  # on the gateway's own HTTP listener
        page = await enter_password(browser, link, planted)
        with anyio.fail_after(CLIENT_TIMEOUT_S):
            second = await client.call_tool("remote_root_exec", args)
        results.append(second.model_dump(mode="json"))
    assert page.after_status == 200
    assert not second.is_error, second
    assert second.structured_content is not None
    stdout = second.structured_content["stdout"]
    raw = capture_file.read_bytes()
    assert stdout.split()[-1] == str(len(raw)), stdout  # the whole list, as root wrote it
    captured = raw.decode("utf-8", "replace")
    assert "sudo -S -p [rog-sudo-" in stdout, stdout  # the waiting sudo is in the captured process list
    assert "sudo -S -p [rog-sudo-" in captured
    assert second.structured_content["privilege"]["provider"] == "sudo_password"
    haystacks = {
        "gateway log": gw.stderr_text(),
        "page after submission": page.after_html,
        "target process list": captured,
        "root command's output": stdout,
        "tool results": json.dumps(results),
    }
    files = [p for p in gw.state_dir.rglob("*") if p.is_file()]
    assert any(p.name.startswith("audit") for p in files)
    for path in files:
        haystacks[str(path)] = path.read_bytes().decode("utf-8", "replace")
    assert "remote_root_exec" in haystacks["gateway log"] or any(
        "remote_root_exec" in h for h in haystacks.values()
    )
    found = [where for where, text in haystacks.items() if planted in text]
    assert found == []


@pytest.fixture(scope="module")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


def _inspect(inspector: InstalledTool, gw: GatewayProcess, home: Path, *tool_args: str) -> ToolRun:
    args = [a for pair in tool_args for a in ("--tool-arg", pair)]
    argv = [
        "--cli",
        gw.url,
        "--transport",
        "http",
        "--method",
        "tools/call",
        "--tool-name",
        "remote_root_exec",
    ]
    argv += [*args, "--format", "json", "--stored-auth-only", "--header", f"Authorization: Bearer {gw.token}"]
    return inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=home)


def test_the_inspector_cli_runs_remote_root_exec_as_uid_0(
    inspector: InstalledTool, root_gateway: GatewayProcess, tmp_path: Path
) -> None:
    run = _inspect(inspector, root_gateway, tmp_path, "target=sudo", 'argv=["id", "-u"]')
    context = f"{run.describe()}\n--- gateway stderr ---\n{root_gateway.stderr_text()[-3000:]}"
    assert run.returncode == 0, context
    result = json.loads(run.stdout)["result"]
    assert result.get("isError") is False, context
    assert result["structuredContent"]["stdout"].strip() == "0"
    assert result["structuredContent"]["privilege"]["provider"] == "sudo_nopasswd"


@pytest.mark.parametrize(
    ("target", "code", "reason"),
    [("plain", "policy_denied", "not_root_allowed"), ("pass", "privilege_error", "secret_required")],
    ids=["outside-the-root-allow-list", "password-not-entered-yet"],
)
def test_the_inspector_cli_shows_remote_root_exec_failures_with_code_and_message(
    inspector: InstalledTool,
    root_gateway: GatewayProcess,
    tmp_path: Path,
    target: str,
    code: str,
    reason: str,
) -> None:
    run = _inspect(inspector, root_gateway, tmp_path, f"target={target}", 'argv=["id", "-u"]')
    context = f"{run.describe()}\n--- gateway stderr ---\n{root_gateway.stderr_text()[-3000:]}"
    result = json.loads(run.stdout)["result"]
    assert result["isError"] is True, context
    assert "structuredContent" not in result, context
    last = json.loads(run.stderr.strip().splitlines()[-1])["error"]
    assert last["code"] == "tool_is_error", context  # not an output-schema complaint
    error = result["_meta"]["remoteops-gateway/error"]
    assert error["code"] == code
    assert error["details"]["reason"] == reason
    if code == "privilege_error":
        assert error["details"]["entry"] in error["message"]  # the human's link, in what is shown
