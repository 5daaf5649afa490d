"""Real health checks of a forward, each reported on its own.

* ``process``: the recorded process runs with the recorded identity (PID, start time, boot id, argv).
* ``local_listener`` (local, dynamic): a TCP connect to the gateway-side listener.
* ``socks_handshake`` (dynamic): a SOCKS5 greeting (no authentication) answered with ``05 00``.
* ``remote_listener`` (remote): ``ss -Htln sport = :PORT`` on the target through ``RemoteOps.run``.

A listener bound to a wildcard address is checked on loopback. Every check has its own ceiling.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio

from remoteops._errors import RemoteOpsError
from remoteops.forwards.models import CheckName, ForwardCheck, ForwardHealth, ForwardRecord
from remoteops.forwards.proc import identity_alive

if TYPE_CHECKING:
    from remoteops._runner import Runner

__all__ = ["check_forward", "connect_address"]

_SOCKS_GREETING = b"\x05\x01\x00"


def connect_address(bind_address: str) -> str:
    host = bind_address.strip("[]")
    if host in ("0.0.0.0", "*", ""):  # noqa: S104 - a wildcard listener is reached on loopback
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return "127.0.0.1" if host == "localhost" else host


async def _timed(
    name: CheckName, limit_s: float, check: Callable[[], Awaitable[tuple[bool | None, str]]]
) -> ForwardCheck:
    started = time.monotonic()
    try:
        with anyio.fail_after(limit_s):
            ok, detail = await check()
    except TimeoutError:
        ok, detail = False, f"no answer within {limit_s} s"
    except OSError as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc.strerror or exc}"
    except RemoteOpsError as exc:
        ok, detail = None, f"{type(exc).__name__}: {exc.detail[-300:]}"
    elapsed = round((time.monotonic() - started) * 1000, 1)
    return ForwardCheck(name=name, ok=ok, detail=detail, duration_ms=elapsed)


async def _connect(host: str, port: int) -> tuple[bool | None, str]:
    stream = await anyio.connect_tcp(host, port)
    await stream.aclose()
    return True, f"connected to {host}:{port}"


async def _socks(host: str, port: int) -> tuple[bool | None, str]:
    async with await anyio.connect_tcp(host, port) as stream:
        await stream.send(_SOCKS_GREETING)
        reply = b""
        while len(reply) < 2:
            reply += await stream.receive(2 - len(reply))
    if reply == b"\x05\x00":
        return True, "SOCKS5 greeting accepted (no authentication)"
    return False, f"unexpected SOCKS reply {reply.hex()}"


async def _remote_listener(ops: Runner, target: str, port: int) -> tuple[bool | None, str]:
    result = await ops.run(target, ["ss", "-Htln", "sport", "=", f":{port}"], timeout_s=10)
    if result.exit_code == 127:
        return None, "ss is not available on the target"
    if result.exit_code != 0:
        return None, f"ss exited {result.exit_code}: {result.stderr.strip()[-200:]}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if lines:
        return True, f"listening on the target: {lines[0].split()[2] if len(lines[0].split()) > 2 else port}"
    return False, f"nothing listens on port {port} on the target"


async def check_forward(ops: Runner, record: ForwardRecord, *, limit_s: float) -> ForwardHealth:
    checks: list[ForwardCheck] = []
    alive = identity_alive(record.process)
    if alive is None:
        detail = "the PID belongs to another process now"
    else:
        detail = "running with the recorded identity" if alive else "not running"
    checks.append(ForwardCheck(name="process", ok=alive is True, detail=detail))
    spec = record.spec
    host = connect_address(spec.bind_address)
    port = record.bind_port
    if spec.kind in ("local", "dynamic"):
        checks.append(await _timed("local_listener", limit_s, lambda: _connect(host, port)))
    if spec.kind == "dynamic":
        checks.append(await _timed("socks_handshake", limit_s, lambda: _socks(host, port)))
    if spec.kind == "remote":
        checks.append(
            await _timed("remote_listener", limit_s, lambda: _remote_listener(ops, spec.target, port))
        )
    healthy = all(check.ok is not False for check in checks) and checks[0].ok is True
    return ForwardHealth(
        checked_at=datetime.now(UTC).isoformat(timespec="seconds"), healthy=healthy, checks=checks
    )
