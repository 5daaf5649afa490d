"""One state directory, one owner: a second gateway on it refuses at start (naming the owner's pid and the
option to use), a killed owner's lock never blocks, and two demos without a configured state directory run
side by side, each with its own directory and an intact audit chain."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from acceptance.harness import starts
from tests.fixtures.gateway_proc import run_gateway, write_config

pytestmark = pytest.mark.slow  # real subprocess gateways

_TIMEOUT_S = 60


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("REMOTEOPS_GATEWAY")}
    return {**base, **extra}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
        env=env or _env(),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rogl-", dir="/tmp"))  # control sockets want short paths
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_second_gateway_on_the_same_state_dir_refuses_naming_the_owner_pid_and_the_option(
    tmp_path: Path,
) -> None:
    with run_gateway(tmp_path) as gw:
        second = _cli("--config", str(tmp_path / "gateway.toml"), "serve", "--http", "--port", "0")
        assert second.returncode == 2, second.stderr
        assert "Traceback" not in second.stderr
        line = second.stderr.strip()
        assert len(line.splitlines()) == 1, second.stderr
        assert f"pid {gw.pid}" in line
        assert "state_dir" in line
        assert str(gw.state_dir) in line
        stdio = _cli("--config", str(tmp_path / "gateway.toml"), "serve", "--stdio")
        assert stdio.returncode == 2, stdio.stderr
        assert f"pid {gw.pid}" in stdio.stderr
    assert gw.exit_code == 0, gw.stderr_text()[-3000:]  # the refusals did not disturb the owner


def test_a_lock_left_by_a_killed_gateway_does_not_block_the_next_start(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with run_gateway(tmp_path / "a") as gw:
        os.kill(gw.pid, signal.SIGKILL)
        gw.proc.wait(timeout=_TIMEOUT_S)
    lock = gw.state_dir / "gateway.lock"
    assert lock.read_text().strip() == str(gw.pid)  # the dead owner's file stays; the kernel dropped the lock
    with run_gateway(tmp_path / "b", {"state_dir": str(gw.state_dir)}) as again:
        assert again.pid != gw.pid
    assert again.exit_code == 0, again.stderr_text()[-3000:]


def test_two_gateways_sharing_one_audit_path_outside_their_state_dirs_cannot_both_start(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "shared" / "audit.jsonl"
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    with run_gateway(first_dir, {"audit": {"path": str(audit)}}) as gw:
        cfg = write_config(
            second_dir / "g.toml", {"state_dir": str(second_dir / "state"), "audit": {"path": str(audit)}}
        )
        second = _cli("--config", str(cfg), "serve", "--http", "--port", "0")
        assert second.returncode == 2, second.stderr
        assert f"pid {gw.pid}" in second.stderr
        assert "audit.path" in second.stderr


@starts("gateway")
@contextmanager
def _demo_http(env: dict[str, str], ready: Path) -> Iterator[dict[str, object]]:
    """``demo`` over HTTP with no configuration at all (the README's ``./ops/demo.sh``)."""
    argv = [sys.executable, "-m", "gateway", "demo", "--port", "0", "--ready-file", str(ready)]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + _TIMEOUT_S
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "demo not ready in time"
            time.sleep(0.05)
        info = json.loads(ready.read_text(encoding="utf-8"))
        info["token"] = Path(info["token_file"]).read_text(encoding="utf-8").strip()
        yield info
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


async def _echo(client: Client, word: str) -> None:
    result = await client.call_tool("remote_exec", {"target": "demo", "argv": ["echo", word]})
    assert result.structured_content is not None, result
    assert result.structured_content["stdout"] == f"{word}\n"


@pytest.mark.anyio
async def test_demo_and_demo_stdio_run_side_by_side_each_in_its_own_state_dir(short_dir: Path) -> None:
    env = _env(XDG_STATE_HOME=str(short_dir / "xdg"))
    with _demo_http(env, short_dir / "ready.json") as info:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {info['token']}"}, timeout=httpx2.Timeout(30)
        )
        async with (
            http,
            Client(streamable_http_client(str(info["url"]), http_client=http), mode="legacy") as web,
        ):
            await _echo(web, "first")
            params = StdioServerParameters(
                command=sys.executable, args=["-m", "gateway", "demo", "--stdio"], env=env
            )
            async with Client(params, mode="legacy") as stdio:
                await _echo(stdio, "second")
                await _echo(web, "again")  # the first demo's keys and ssh_config are untouched
    base = short_dir / "xdg" / "remoteops-gateway"
    assert sorted(p.name for p in base.iterdir()) == ["demo-1", "demo-2"]
    for slot in ("demo-1", "demo-2"):  # each chain is one process's: intact
        verify = _cli("audit", "verify", env={**env, "REMOTEOPS_GATEWAY__STATE_DIR": str(base / slot)})
        assert verify.returncode == 0, verify.stdout + verify.stderr
