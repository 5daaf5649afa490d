"""Managed SSH port forwards through a gateway of the phase's own over MCP/HTTP: -L to an HTTP server on
the target's loopback serves real requests, -D carries a SOCKS5 request, -R exposes a gateway-side server to
the target (fetched from the target), named reuse returns the same forward and process, a gateway restart
adopts the live forwards and marks a killed one ``lost``, close leaves no process (checked through pidfds).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio

from acceptance._mcp import error_code, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.procs import processes_mentioning
from acceptance.phases._util import ms_figures, own_gateway_config, pidfd_exited, running, timed

__all__ = ["forwards"]

_IO_S = 10.0
FETCH = (
    "import sys, urllib.request; "
    "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
)
"""Run by python3 on the target: what the -R check fetches from there."""


@contextmanager
def _http_server(body: bytes) -> Iterator[tuple[int, threading.Thread]]:
    """An HTTP server on 127.0.0.1 (the target's loopback: the target is this machine) answering every GET
    with ``body`` + the request path; stopped and joined on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body + self.path.encode()
            # one write: headers and body apart would meet Nagle and the client's delayed ACK (~40 ms)
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="acc-forwards-http", daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), thread
    finally:
        server.shutdown()
        server.server_close()
        thread.join(_IO_S)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def _http_over(sock: socket.socket, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200"):
        raise ConnectionError(f"HTTP answer {head[:80]!r}")
    return body


def http_get(port: int, path: str) -> bytes:
    """A plain HTTP/1.0 GET to 127.0.0.1:port (blocking; run it in a worker thread)."""
    with socket.create_connection(("127.0.0.1", port), timeout=_IO_S) as sock:
        return _http_over(sock, path)


def socks_get(proxy_port: int, dest_port: int, path: str) -> bytes:
    """The same GET to 127.0.0.1:dest_port through a SOCKS5 proxy (RFC 1928, no auth, CONNECT)."""
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=_IO_S) as sock:
        sock.sendall(b"\x05\x01\x00")
        if _recv_exact(sock, 2) != b"\x05\x00":
            raise ConnectionError("SOCKS5 method negotiation refused")
        sock.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + dest_port.to_bytes(2, "big"))
        reply = _recv_exact(sock, 10)
        if reply[:2] != b"\x05\x00" or reply[3] != 1:
            raise ConnectionError(f"SOCKS5 CONNECT refused: {reply!r}")
        return _http_over(sock, path)


def _checks(view: dict[str, Any]) -> dict[str, bool | None]:
    health = view.get("last_health") or {}
    return {c["name"]: c["ok"] for c in health.get("checks", [])}


@phase(
    "forwards",
    "SSH port forwards: -L/-D/-R served, named reuse, restart adoption, clean close",
    needs=("sshd",),
)
async def forwards(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    token = secrets.token_hex(8).encode()
    http_port, server_thread = ctx.stack.enter_context(_http_server(token))
    ctx.created("the phase's HTTP server thread stopped", lambda: not server_thread.is_alive())
    ids: list[str] = []
    pids: list[int] = []
    ctx.created(
        "every forward's ssh process is gone",
        lambda: not [pid for pid in pids if running(pid)] and not [i for i in ids if processes_mentioning(i)],
    )
    config = own_gateway_config(
        env,
        [{"name": "plain", "host": env.sshd.alias("plain")}],
        tools={"toolsets": ["inspect", "execute", "teardown"]},
    )
    gateway = await ctx.stack.enter_async_context(env.restartable_gateway("forwards", config))
    first_session = await ctx.stack.enter_async_context(AsyncExitStack())  # closed before the restart
    call = (await first_session.enter_async_context(env.client_of(gateway.gw))).call

    async def create(args: dict[str, Any]) -> tuple[dict[str, Any], float]:
        result, ms = await timed(call("forward_create", {"target": "plain", **args}))
        created = structured(result)
        view = created["forward"]
        if view["id"] not in ids:
            ids.append(view["id"])
            pids.append(view["pid"])
        return created, ms

    # -L to the HTTP server on the target's loopback, named
    local_spec = {"kind": "local", "dest_host": "127.0.0.1", "dest_port": http_port, "name": "acc-web"}
    local, local_ms = await create(local_spec)
    lview = local["forward"]
    ctx.check(local["reused"] is False and lview["state"] == "active", f"-L create: {local}")
    direct_ms = [(await timed_sync(http_get, http_port, "/direct"))[1] for _ in range(ctx.n(10, 100))]
    request_ms: list[float] = []
    for i in range(ctx.n(10, 100)):
        body, ms = await timed_sync(http_get, lview["bind_port"], f"/l{i}")
        ctx.check(body == token + f"/l{i}".encode(), f"-L request {i} answered {body[:80]!r}")
        request_ms.append(ms)
    again, reuse_ms = await create(local_spec)
    ctx.check(
        (again["reused"], again["forward"]["id"], again["forward"]["pid"])
        == (True, lview["id"], lview["pid"]),
        f"named reuse: {again}",
    )
    ctx.check(len(processes_mentioning(lview["id"])) == 1, "named reuse started a second process")
    clash = await call("forward_create", {"target": "plain", **local_spec, "dest_port": http_port + 1})
    ctx.check(error_code(clash) == "conflict", f"same name, another specification: {clash}")

    # -D: a SOCKS5 request; its status makes a real handshake
    dynamic, dynamic_ms = await create({"kind": "dynamic"})
    dview = dynamic["forward"]
    body, socks_ms = await timed_sync(socks_get, dview["bind_port"], http_port, "/socks")
    ctx.check(body == token + b"/socks", f"SOCKS5 request answered {body[:80]!r}")
    status = structured(await call("forward_status", {"id": dview["id"]}))
    checks = _checks(status)
    ctx.check(
        status["last_health"]["healthy"] is True
        and checks.get("socks_handshake") is True
        and checks.get("local_listener") is True,
        f"-D health: {status['last_health']}",
    )

    # -R: a server on this side reached from the target
    remote, remote_ms = await create({"kind": "remote", "dest_host": "127.0.0.1", "dest_port": http_port})
    rview = remote["forward"]
    url = f"http://127.0.0.1:{rview['bind_port']}/remote"
    fetched = structured(
        await call("remote_exec", {"target": "plain", "argv": ["python3", "-c", FETCH, url]})
    )
    ctx.check(fetched["stdout"] == (token + b"/remote").decode(), f"-R fetched from the target: {fetched}")
    rstatus = structured(await call("forward_status", {"id": rview["id"]}))
    ctx.check(_checks(rstatus).get("remote_listener") is True, f"-R health: {rstatus['last_health']}")

    # restart: the live forwards are adopted (same id and pid), one killed meanwhile is lost
    os.kill(dview["pid"], signal.SIGKILL)
    await first_session.aclose()  # the MCP session ends with its gateway
    new_gw, restart_s = await gateway.restart()
    call = (await ctx.stack.enter_async_context(env.client_of(new_gw))).call
    listed = {v["id"]: v for v in structured(await call("forward_list", {}))["forwards"]}
    ctx.check(set(listed) == set(ids), f"after the restart: {sorted(listed)}, want {sorted(ids)}")
    for view in (lview, rview):
        got = listed[view["id"]]
        ctx.check(
            (got["state"], got["adopted"], got["pid"]) == ("active", True, view["pid"]),
            f"{view['kind']} forward after the restart: {got}",
        )
    ctx.check(listed[dview["id"]]["state"] == "lost", f"the killed -D forward: {listed[dview['id']]}")
    body = (await timed_sync(http_get, lview["bind_port"], "/after"))[0]
    ctx.check(body == token + b"/after", "the adopted -L forward does not serve")
    section = structured(await call("gateway_health", {}))["forwards"]
    ctx.check(
        (section["active"], section["lost"], section["adopted"]) == (2, 1, 2), f"gateway_health: {section}"
    )

    # close: identity-checked, the process really gone (pidfd readable), records dropped
    close_ms: list[float] = []
    for view in (lview, rview):
        fd = os.pidfd_open(view["pid"])
        try:
            result, ms = await timed(call("forward_close", {"id": view["id"]}))
            closed = structured(result)
            ctx.check(
                (closed["outcome"], closed["signalled"], closed["record_removed"])
                == ("terminated", True, True),
                f"close of the {view['kind']} forward: {closed}",
            )
            ctx.check(pidfd_exited(fd), f"the {view['kind']} forward's process {view['pid']} still runs")
            close_ms.append(ms)
        finally:
            os.close(fd)
    lost = structured(await call("forward_close", {"id": dview["id"]}))
    ctx.check(
        (lost["outcome"], lost["record_removed"]) == ("not_running", True), f"close of the lost: {lost}"
    )
    unknown = await call("forward_close", {"id": "fwd-" + "0" * 12})
    ctx.check(error_code(unknown) == "not_found", f"close of an unknown id: {unknown}")
    ctx.check(structured(await call("forward_list", {}))["forwards"] == [], "forwards left after closing all")
    ctx.figures.update(
        {
            "forwards_created": len(ids),
            "create_ms": {
                "local": round(local_ms, 1),
                "dynamic": round(dynamic_ms, 1),
                "remote": round(remote_ms, 1),
            },
            "named_reuse_ms": round(reuse_ms, 1),
            **ms_figures("http_direct", direct_ms),
            **ms_figures("http_via_L", request_ms),
            "socks5_request_ms": round(socks_ms, 1),
            "gateway_restart_s": round(restart_s, 2),
            "adopted": section["adopted"],
            "lost_after_kill": section["lost"],
            **ms_figures("close", close_ms),
        }
    )


async def timed_sync(fn: Callable[..., bytes], *args: Any) -> tuple[bytes, float]:
    """Run a blocking client request in a worker thread; (its answer, milliseconds)."""
    started = time.perf_counter()
    result = await anyio.to_thread.run_sync(fn, *args)
    return result, (time.perf_counter() - started) * 1000
