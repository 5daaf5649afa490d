"""Running the gateway: stdio or guarded HTTP under uvicorn, with sd_notify and a bounded drain.

HTTP shutdown: SIGTERM/SIGINT → ``STOPPING=1`` → stop accepting → in-flight calls drain for at most
``server.drain_timeout_s`` → runtime closed (masters, upstreams) → exit 0.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio
import structlog
import uvicorn

from gateway._catalog import AnySpec
from gateway._early import EarlyUpstreams
from gateway._errors import StartupError
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.console.pages import console_routes, operator_auth
from gateway.secrets.page import secret_routes
from gateway.serving import sse
from gateway.serving.drain import Drain, StdioTransport
from gateway.serving.http import build_http_app, check_auth_choice, ensure_token, public_url
from gateway.serving.memory import release_startup_memory
from gateway.serving.sdnotify import Notifier
from gateway.serving.server import build_server
from gateway.serving.stdio import AnswerUnparseable
from remoteops import atomic_write

__all__ = ["serve_http", "serve_stdio"]

_log = structlog.get_logger("gateway.serve")
_FLUSH_S = 5.0  # the last answers reach a client that reads; one that does not cannot hold the exit


async def serve_stdio(
    settings: Settings, specs: Sequence[AnySpec], redactor: Redactor, *, early: EarlyUpstreams | None = None
) -> None:
    """Serve one MCP connection on stdin/stdout. Nothing but protocol is ever written to stdout.
    ``early``: stdio upstreams already started (``gateway._early``), handed to the relay."""
    principal = f"stdio:{os.getuid()}"
    operator = ensure_token(settings.operator_token_path, "operator token")
    redactor.add_secret(operator)
    async with Runtime(settings, specs, redactor=redactor, early=early) as rt:
        # the console and approval pages open with the password page's loopback listener, on first need
        rt.secret_listener.add_routes(console_routes(rt, operator_auth(rt, operator)))
        server = build_server(rt, stdio_principal=principal)
        notifier = Notifier.from_env()
        drain_s = settings.server.drain_timeout_s
        async with anyio.create_task_group() as tg, StdioTransport() as stdio:
            drain = Drain(stdio.read, stdio.write)

            async def shut_down() -> None:
                with anyio.move_on_after(drain_s):
                    await drain.settle()  # in-flight calls finish within the drain, as over HTTP
                await drain.answer_rest()  # the rest get a shutdown error: no request is left unanswered
                with anyio.move_on_after(_FLUSH_S):
                    await stdio.flush()
                tg.cancel_scope.cancel()

            def stop() -> None:
                notifier.stopping("draining in-flight calls")
                drain.stop()
                tg.start_soon(shut_down)

            tg.start_soon(_stop_on_signal, stop)
            release_startup_memory()
            notifier.ready("serving on stdio")
            answering = AnswerUnparseable(drain.read, drain.write)  # no line goes unanswered
            await server.run(answering, drain.write, server.create_initialization_options())
            with anyio.move_on_after(_FLUSH_S):
                await stdio.flush()
            tg.cancel_scope.cancel()
        _ignore_further_terms()


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: it would re-raise SIGTERM after the drain (exit ≠ 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(on_signal: Callable[[], None]) -> None:
    """SIGTERM/SIGINT start a graceful stop; later signals are absorbed while the drain runs (bounded by
    ``server.drain_timeout_s``), so a second TERM from a supervisor cannot cut the drain short."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        stopping = False
        async for signum in signals:
            if not stopping:
                stopping = True
                on_signal()
            else:
                _log.info("already_stopping", signal=signal.Signals(signum).name)


def _ignore_further_terms() -> None:
    with contextlib.suppress(ValueError):  # only possible from the main thread
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, or a StartupError naming host:port and the reason (in use, not local…)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP;
    # without it a response written as headers + body waits ~40 ms (Nagle + the client's delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise StartupError(f"cannot listen on {shown}: {reason}") from None
    sock.set_inheritable(True)
    return sock


async def _watchdog(notifier: Notifier, stopping: anyio.Event, health_url: str) -> None:
    """Ping WATCHDOG=1 only while the loop runs on time and the listener answers /healthz."""
    interval = notifier.watchdog_interval_s
    if interval is None:
        await stopping.wait()
        return
    import httpx  # only a systemd watchdog needs it: stdio start-up does not pay for it

    async with httpx.AsyncClient(timeout=httpx.Timeout(min(interval, 2.0))) as client:
        while not stopping.is_set():
            try:
                ok = (await client.get(health_url)).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                notifier.watchdog()
            else:
                notifier.status("listener not answering /healthz")
            with anyio.move_on_after(interval):
                await stopping.wait()


async def serve_http(
    settings: Settings,
    specs: Sequence[AnySpec],
    redactor: Redactor,
    *,
    token: str | None,
    ready_file: Path | None = None,
    announce: bool = True,
    show_token: bool = False,
) -> None:
    server_cfg = settings.server
    check_auth_choice(settings, token)
    sock = _bind(server_cfg.host, server_cfg.port)
    port = sock.getsockname()[1]
    url = public_url(settings, port)
    sse.install()
    operator = ensure_token(settings.operator_token_path, "operator token")
    redactor.add_secret(operator)
    async with Runtime(settings, specs, redactor=redactor) as rt:
        server = build_server(rt)
        # the password page, the console and the approval pages: own auth (a link, an operator session)
        pages = [
            *secret_routes(rt.secrets),
            *console_routes(rt, operator_auth(rt, operator, bearer_token=token)),
        ]
        app = build_http_app(
            server, settings, token=token, port=port, runtime=rt, redactor=redactor, extra_routes=pages
        )
        rt.secrets.serve_at(url.removesuffix(server_cfg.path))  # the password page is on this listener
        rt.approvals.serve_at(url.removesuffix(server_cfg.path))
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            http="httptools",
            ws="none",  # no websocket routes: uvicorn would import a websocket library whenever installed
            timeout_graceful_shutdown=max(1, int(server_cfg.drain_timeout_s)),
            server_header=False,
        )
        userver = _Uvicorn(config)
        notifier = Notifier.from_env()
        health_url = url.removesuffix(server_cfg.path) + "/healthz"
        async with anyio.create_task_group() as tg:

            async def run_server() -> None:
                await userver.serve(sockets=[sock])
                tg.cancel_scope.cancel()

            tg.start_soon(run_server)

            stopping = anyio.Event()

            def stop() -> None:
                notifier.stopping("draining in-flight calls")
                stopping.set()
                rt.stopping()  # the console's live streams end, so they do not hold the drain
                userver.should_exit = True

            tg.start_soon(_stop_on_signal, stop)
            with anyio.fail_after(30):
                while not userver.started:  # noqa: ASYNC110 - uvicorn exposes only a flag
                    await anyio.sleep(0.01)
            info = {
                "url": url,
                "port": port,
                "pid": os.getpid(),
                "auth": settings.auth.mode,
                "token_file": str(settings.token_path) if token else None,
                "healthz": health_url,
                "audit_file": str(settings.audit_path),
            }
            if announce:
                print(f"remoteops-gateway {rt.identity.version} serving MCP at {url}", file=sys.stderr)
                if token:
                    print(
                        f"  authenticate with: Authorization: Bearer <token from {settings.token_path}>",
                        file=sys.stderr,
                    )
                    if show_token:
                        print(f"  token: {token}", file=sys.stderr)
                print(f"  health: {health_url}   audit: {settings.audit_path}", file=sys.stderr)
                print(
                    f"  console: {health_url.removesuffix('/healthz')}/console "
                    f"(operator token in {settings.operator_token_path})",
                    file=sys.stderr,
                )
            release_startup_memory()
            if ready_file is not None:  # last: whoever waits for it finds the banner already printed
                data = json.dumps(info).encode()
                await anyio.to_thread.run_sync(lambda: atomic_write(ready_file, data, mode=0o600))
            _log.info("serving", url=url, auth=settings.auth.mode)
            notifier.ready(f"serving MCP at {url}")
            tg.start_soon(_watchdog, notifier, stopping, health_url)
        _ignore_further_terms()  # the runtime's own shutdown (masters, upstreams) is bounded; let it finish
    _log.info("stopped")
