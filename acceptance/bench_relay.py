"""Relay benchmark: libtmux-mcp's ``list_sessions`` called directly, through the gateway, through mcp-proxy.

Run from the repository root::

    .venv/bin/python -m acceptance.bench_relay [--calls N] [--warmup N] [--json] [--json-out FILE] [--no-peer]

Everything is measured in ONE run against ONE tmux server (a unique ``LIBTMUX_SOCKET`` holding one session):

* ``direct HTTP``: libtmux-mcp served over streamable HTTP by ``fastmcp run ... --transport http`` (the
  baseline every ratio is taken to);
* ``direct stdio``: libtmux-mcp spawned over stdio by the client itself (reference: what stdio costs);
* ``gateway → HTTP upstream``: the real gateway subprocess over HTTP (bearer token sent), relaying to the
  HTTP libtmux-mcp above;
* ``gateway → stdio upstream``: the gateway relaying to a libtmux-mcp it spawns over stdio;
* ``mcp-proxy → stdio upstream``: PyPI ``mcp-proxy`` in its server mode
  (``mcp-proxy --port P -- libtmux-mcp``): it spawns libtmux-mcp over stdio and exposes it over streamable
  HTTP at ``/mcp``. Its other mode (URL given) only serves stdio, so it cannot put an HTTP endpoint in front
  of an HTTP upstream without chaining two proxies; the fair comparison for it is therefore the gateway with
  a stdio upstream.

Every subject is called by the same client code (``mcp.Client`` in legacy mode over an ``httpx2`` client for
HTTP, raw ``tools/call`` requests so no client-side output validation runs) with one session reused for all
calls. Calls are interleaved (direct, gateway, peer, direct, ...) after a warm-up so drift of the machine hits
every subject alike; ratios are to the direct-HTTP median of the same run.

Every process started is terminated and reaped (this process becomes a child subreaper, so grandchildren such
as the stdio libtmux-mcp of the gateway or of mcp-proxy are reaped here too), the tmux server is killed with
``tmux -L <socket> kill-server`` and the temporary directory is removed.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from acceptance._timing import Call, interleaved, p95
from acceptance.harness.gateway_proc import run_gateway
from acceptance.harness.libtmux import (
    LIBTMUX_MCP,
    http_argv,
    http_url,
    libtmux_env,
    stdio_params,
    tmux_socket,
)
from acceptance.harness.procs import free_port, stop_process

__all__ = ["main"]

TOOL = "list_sessions"
WARMUP = 10
_READY_S = 120.0  # a ceiling: fastmcp starts in ~3 s here, 6+ s on a loaded 2-core machine
_STOP_S = 5.0

ROW_DIRECT = "direct HTTP (baseline)"
ROW_DIRECT_STDIO = "direct stdio (reference)"
ROW_GW_HTTP = "gateway → HTTP upstream"
ROW_GW_STDIO = "gateway → stdio upstream"
ROW_PEER = "mcp-proxy → stdio upstream"
PEER_MODE = (
    "mcp-proxy server mode: `mcp-proxy --port P -- libtmux-mcp` spawns libtmux-mcp over stdio and serves it "
    "over streamable HTTP at /mcp (stdio↔HTTP)"
)
AIM_OVERHEAD = 0.10


# --------------------------------------------------------------------------------------- processes


def _set_subreaper() -> bool:
    """Become a child subreaper so orphaned grandchildren are re-parented to us and can be reaped."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _reap_orphans() -> None:
    """Reap re-parented grandchildren that have exited (only children of ours that nobody else waits on)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _stop_tree(proc: subprocess.Popen[bytes], descendants: set[int]) -> None:
    """SIGTERM → bounded wait → SIGKILL → reap, then the same for what the process left behind."""
    stop_process(proc, _STOP_S)
    deadline = time.monotonic() + _STOP_S
    while any(_alive(pid) for pid in descendants) and time.monotonic() < deadline:
        _reap_orphans()
        time.sleep(0.05)
    for pid in descendants:
        if _alive(pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _reap_orphans()


@contextmanager
def _process(argv: list[str], *, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as err:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        yield proc
    finally:
        _stop_tree(proc, _descendants(proc.pid))


@contextmanager
def _watch_tree(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """For processes started elsewhere (the gateway fixture): clean up what they leave behind."""
    seen: set[int] = set()
    try:
        yield
    finally:
        seen = _descendants(proc.pid) if proc.poll() is None else seen
        _stop_tree(proc, seen)


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _READY_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"port {port} not open in {_READY_S}s: {log.read_text()[-3000:]}"
                ) from None
            time.sleep(0.05)


def _libtmux_stdio_argv(sock: str) -> list[str]:
    # `env` keeps the socket choice inside the argv (an upstream's stdio env is a TOML table otherwise).
    return ["/usr/bin/env", *(f"{k}={v}" for k, v in libtmux_env(sock).items()), str(LIBTMUX_MCP)]


# --------------------------------------------------------------------------------------- measuring


@dataclass
class Subject:
    label: str
    open: Callable[[AsyncExitStack], Awaitable[Client]]
    note: str = ""
    samples: list[float] = field(default_factory=list)
    client: Client | None = None


@dataclass
class Row:
    subject: str
    median_ms: float
    p95_ms: float
    ratio: float | None
    calls: int
    note: str


def _http_opener(url: str, headers: dict[str, str]) -> Callable[[AsyncExitStack], Awaitable[Client]]:
    async def open_(stack: AsyncExitStack) -> Client:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60))
        )
        transport = streamable_http_client(url, http_client=http)
        client: Client = await stack.enter_async_context(Client(transport, mode="legacy"))  # type: ignore[arg-type]
        return client

    return open_


def _stdio_opener(sock: str, log: Path) -> Callable[[AsyncExitStack], Awaitable[Client]]:
    async def open_(stack: AsyncExitStack) -> Client:
        params = stdio_params(sock)
        errlog = stack.enter_context(log.open("w", encoding="utf-8"))
        transport = stdio_client(params, errlog=errlog)
        client: Client = await stack.enter_async_context(Client(transport, mode="legacy"))  # type: ignore[arg-type]
        return client

    return open_


_REQUEST = types.CallToolRequest(params=types.CallToolRequestParams(name=TOOL, arguments={}))


async def _call(client: Client) -> float:
    started = time.perf_counter()
    result = await client.session.send_request(_REQUEST, types.CallToolResult)
    elapsed = (time.perf_counter() - started) * 1000
    if result.is_error:
        raise RuntimeError(f"{TOOL} failed: {result.content!r}")
    return elapsed


async def _wait_listed(client: Client, label: str) -> None:
    """The gateway answers before its upstream is connected: wait until the relayed tool is listed."""
    with anyio.fail_after(_READY_S):
        while True:
            listed = await client.session.send_request(types.ListToolsRequest(), types.ListToolsResult)
            if any(tool.name == TOOL for tool in listed.tools):
                return
            await anyio.sleep(0.1)
    raise RuntimeError(f"{label}: {TOOL} never listed")  # pragma: no cover - fail_after raises first


async def _self_timed(call: Call) -> float:
    elapsed = await call()
    assert isinstance(elapsed, float)
    return elapsed


async def _measure(subjects: list[Subject], calls: int, warmup: int) -> None:
    async with AsyncExitStack() as stack:
        for subject in subjects:
            subject.client = await subject.open(stack)
            await _wait_listed(subject.client, subject.label)
        calls_of = {subject.label: functools.partial(_call, subject.client) for subject in subjects}
        # rotated: no subject always follows the same other one; _call times itself (ms, the request only)
        samples = await interleaved(calls_of, calls, warmup=warmup, order="rotate", timer=_self_timed)
        for subject in subjects:
            subject.samples.extend(samples[subject.label])


def _rows(subjects: list[Subject]) -> list[Row]:
    base = next((statistics.median(s.samples) for s in subjects if s.label == ROW_DIRECT), None)
    rows = []
    for s in subjects:
        median = statistics.median(s.samples)
        rows.append(
            Row(s.label, median, p95(s.samples), median / base if base else None, len(s.samples), s.note)
        )
    return rows


def _verdicts(rows: list[Row]) -> list[str]:
    by = {r.subject: r for r in rows}
    out = []
    gw, direct = by.get(ROW_GW_HTTP), by.get(ROW_DIRECT)
    if gw and direct:
        added = gw.median_ms / direct.median_ms - 1
        ok = "meets" if added <= AIM_OVERHEAD else "MISSES"
        out.append(
            f"gateway → HTTP upstream adds {added * 100:+.1f} % ({gw.median_ms - direct.median_ms:+.2f} ms) "
            f"over direct HTTP: {ok} the aim of ≤ {AIM_OVERHEAD * 100:.0f} %"
        )
    gws, peer = by.get(ROW_GW_STDIO), by.get(ROW_PEER)
    if gws and peer:
        faster = "faster" if gws.median_ms < peer.median_ms else "NOT faster"
        out.append(
            f"gateway → stdio upstream {gws.median_ms:.2f} ms vs mcp-proxy → stdio upstream "
            f"{peer.median_ms:.2f} ms: gateway is {faster} than the peer "
            f"({gws.median_ms / peer.median_ms:.2f}x)"
        )
    return out


def _table(rows: list[Row]) -> str:
    lines = ["| subject | median ms | p95 ms | ratio to direct |", "|---|---:|---:|---:|"]
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "—"
        lines.append(f"| {r.subject} | {r.median_ms:.2f} | {r.p95_ms:.2f} | {ratio} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- main


def run(calls: int, warmup: int, with_peer: bool) -> dict[str, Any]:
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    mcp_proxy: Path | None = None
    if with_peer:
        from acceptance._peers import ensure_mcp_proxy

        mcp_proxy = ensure_mcp_proxy()
    subreaper = _set_subreaper()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIBTMUX_", "REMOTEOPS_GATEWAY"))}
    work = Path(tempfile.mkdtemp(prefix="bench-relay-"))
    try:
        with ExitStack() as stack:
            # A tmux server on its own socket with one session, so ``list_sessions`` returns something real.
            sock = stack.enter_context(tmux_socket("bench-relay", session="bench"))
            up_port = free_port()
            up_log = work / "libtmux-http.log"
            up_env = {**env, **libtmux_env(sock)}
            up = stack.enter_context(_process(http_argv(up_port), env=up_env, log=up_log))
            _wait_port(up_port, up, up_log)
            up_url = http_url(up_port)

            subjects = [Subject(ROW_DIRECT, _http_opener(up_url, {}), "libtmux-mcp via fastmcp run, HTTP")]
            subjects.append(
                Subject(
                    ROW_DIRECT_STDIO,
                    _stdio_opener(sock, work / "libtmux-stdio.log"),
                    "client spawns libtmux-mcp",
                )
            )

            gw_dir = work / "gw-http"
            gw_dir.mkdir()
            gw_cfg = {"upstreams": [{"connection": {"name": "tmux", "transport": "http", "url": up_url}}]}
            gw = stack.enter_context(run_gateway(gw_dir, gw_cfg, env=env))
            stack.enter_context(_watch_tree(gw.proc))
            subjects.append(Subject(ROW_GW_HTTP, _http_opener(gw.url, gw.headers()), "bearer token sent"))

            if with_peer:
                gws_dir = work / "gw-stdio"
                gws_dir.mkdir()
                connection = {"name": "tmux", "transport": "stdio", "command": _libtmux_stdio_argv(sock)}
                gws = stack.enter_context(
                    run_gateway(gws_dir, {"upstreams": [{"connection": connection}]}, env=env)
                )
                stack.enter_context(_watch_tree(gws.proc))
                subjects.append(
                    Subject(ROW_GW_STDIO, _http_opener(gws.url, gws.headers()), "bearer token sent")
                )

                assert mcp_proxy is not None
                peer_port = free_port()
                peer_log = work / "mcp-proxy.log"
                peer_argv = [str(mcp_proxy), "--host", "127.0.0.1", "--port", str(peer_port)]
                peer_argv += ["--log-level", "WARNING"]
                for key, value in libtmux_env(sock).items():
                    peer_argv += ["-e", key, value]
                peer_argv += ["--", str(LIBTMUX_MCP)]
                peer = stack.enter_context(_process(peer_argv, env=env, log=peer_log))
                _wait_port(peer_port, peer, peer_log)
                peer_url = f"http://127.0.0.1:{peer_port}/mcp"
                subjects.append(
                    Subject(ROW_PEER, _http_opener(peer_url, {}), "mcp-proxy 0.13 (mcp 1.x venv)")
                )

            anyio.run(_measure, subjects, calls, warmup)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _reap_orphans()
    rows = _rows(subjects)
    return {
        "tool": TOOL,
        "calls": calls,
        "warmup": warmup,
        "tmux_socket": sock,
        "peer_mode": PEER_MODE if with_peer else None,
        "subreaper": subreaper,
        "rows": [r.__dict__ for r in rows],
        "verdicts": _verdicts(rows),
        "table": _table(rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per subject (default 200)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"untimed calls first (default {WARMUP})")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--no-peer", action="store_true", help="skip mcp-proxy (and the gateway stdio row)")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be ≥ 1")
    result = run(args.calls, max(0, args.warmup), not args.no_peer)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(f"# Relayed `{TOOL}` latency, {args.calls} interleaved calls per subject (same run)\n")
    print(result["table"])
    print()
    if result["peer_mode"]:
        print(f"Peer: {result['peer_mode']}.")
    for line in result["verdicts"]:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
