"""libtmux-mcp as a real MCP server, for the upstream and gateway tests and for ``acceptance/bench_relay.py``.

Each use gets its own tmux server (a unique ``LIBTMUX_SOCKET``, killed with ``tmux -L <socket> kill-server``
afterwards, its socket file removed); libtmux-mcp runs over stdio (``libtmux-mcp``) or over streamable HTTP
(``fastmcp run ... --transport http``). ``pane_round_trip`` drives a terminal through any MCP caller:
create_session → send_keys → wait_for_text → capture_pane. The pytest fixtures ``tmux_socket`` and
``libtmux_url`` (tests/conftest.py) wrap ``tmux_socket`` and ``libtmux_http``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from acceptance.harness import starts
from acceptance.harness.procs import free_port, stop_process, wait_for_port
from upstream import ProgressCallback, Upstream

__all__ = [
    "BIN",
    "LIBTMUX_MCP",
    "READY_S",
    "http_argv",
    "http_url",
    "libtmux_env",
    "libtmux_http",
    "pane_round_trip",
    "spawn_http",
    "stdio_command",
    "stdio_params",
    "text_of",
    "tmux_socket",
]

BIN = Path(sys.executable).parent
LIBTMUX_MCP = BIN / "libtmux-mcp"
READY_S = 120.0  # fastmcp's start-up takes ~3 s here, 6+ s on a loaded 2-core machine
WAIT_TEXT_S = 30.0  # wait_for_text's ceiling in pane_round_trip (libtmux-mcp's cap; it ends at the match)


@starts("tmux")
@contextmanager
def tmux_socket(prefix: str, *, session: str | None = None) -> Iterator[str]:
    """A unique tmux socket name (``<prefix>-<hex>``); optionally a detached ``session`` on it first.

    On exit the tmux server on that socket is killed and its socket file removed.
    """
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    try:
        if session is not None:
            subprocess.run(
                ["tmux", "-L", name, "new-session", "-d", "-s", session, "-x", "80", "-y", "24"],
                check=True,
                timeout=10,
                stdin=subprocess.DEVNULL,
                capture_output=True,
            )
        yield name
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, check=False, timeout=10)
        tmpdir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (tmpdir / name).unlink(missing_ok=True)


def libtmux_env(socket: str) -> dict[str, str]:
    """The test tmux server's panes run a plain ``/bin/sh`` (tmux's default-shell follows ``SHELL``): the
    operator's interactive bash start-up files never run in them. They made panes hang (pyenv's rehash
    waiting on a lock left by a shell killed with its tmux server), and tests would depend on dotfiles."""
    return {"LIBTMUX_SOCKET": socket, "FASTMCP_SHOW_SERVER_BANNER": "false", "SHELL": "/bin/sh", "ENV": ""}


@starts("upstream")
def stdio_command() -> list[str]:
    return [str(LIBTMUX_MCP)]


@starts("upstream")
def stdio_params(socket: str) -> StdioServerParameters:
    """What a client spawns to talk to libtmux-mcp over stdio on ``socket``."""
    return StdioServerParameters(command=str(LIBTMUX_MCP), env=libtmux_env(socket))


@starts("upstream")
def http_argv(port: int) -> list[str]:
    """``fastmcp run`` serving libtmux-mcp over streamable HTTP on 127.0.0.1:``port`` (path ``/mcp``)."""
    import libtmux_mcp

    server_py = Path(libtmux_mcp.__file__).parent / "server.py"
    argv = [str(BIN / "fastmcp"), "run", f"{server_py}:build_mcp_server", "--transport", "http"]
    return [*argv, "--host", "127.0.0.1", "--port", str(port), "--no-banner"]


def http_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/mcp"


@starts("upstream")
def spawn_http(socket: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, **libtmux_env(socket)}
    return subprocess.Popen(http_argv(port), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


@starts("upstream")
@asynccontextmanager
async def libtmux_http(socket: str) -> AsyncIterator[str]:
    """libtmux-mcp over HTTP on a free port; yields its URL once the port is open; stops and reaps it."""
    port = free_port()
    proc = spawn_http(socket, port)
    try:
        await wait_for_port(port, proc, ceiling_s=READY_S)
        yield http_url(port)
    finally:
        stop_process(proc)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def _call(
    caller: Client | Upstream,
    name: str,
    arguments: dict[str, Any],
    progress: ProgressCallback | None = None,
) -> types.CallToolResult:
    if isinstance(caller, Upstream):
        return await caller.call_tool(name, arguments, progress=progress)
    return await caller.call_tool(name, arguments, progress_callback=progress)


async def pane_round_trip(caller: Client | Upstream, marker_prefix: str, session_name: str) -> None:
    """create_session → send_keys → wait_for_text → capture_pane: the echoed marker comes back.

    ``wait_for_text`` matches only output written after it took its entry snapshot, so the command is
    typed without Enter, and Enter is pressed once the wait reports its first progress (sent after the
    snapshot): the marker line is then surely new output and the wait must find it (it can neither see
    it as stale paint nor run to its ceiling)."""
    marker = f"{marker_prefix}-{uuid.uuid4().hex[:8]}"
    created = await caller.call_tool("create_session", {"session_name": session_name})
    assert created.is_error is not True, text_of(created)
    assert isinstance(created.structured_content, dict)
    pane_id = created.structured_content["active_pane_id"]
    command = f"echo {marker}-$((6*7))"
    typed = await _call(caller, "send_keys", {"keys": command, "pane_id": pane_id, "enter": False})
    assert typed.is_error is not True, text_of(typed)
    watching = anyio.Event()
    waited: list[types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        watching.set()

    async def wait() -> None:
        args = {"patterns": [f"{marker}-42"], "pane_id": pane_id, "timeout": WAIT_TEXT_S}
        try:
            waited.append(await _call(caller, "wait_for_text", args, progress=on_progress))
        finally:
            watching.set()  # a wait that ended before any progress fails below, it does not hang

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await watching.wait()
        pressed = await _call(caller, "send_keys", {"keys": "Enter", "pane_id": pane_id, "enter": False})
        assert pressed.is_error is not True, text_of(pressed)
    [result] = waited
    assert result.is_error is not True, text_of(result)
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["found"] is True, result.structured_content
    captured = await caller.call_tool("capture_pane", {"pane_id": pane_id})
    assert isinstance(captured, types.CallToolResult)
    assert f"{marker}-42" in text_of(captured)
