"""A loopback-only HTTP listener for the password entry page, for gateways not serving HTTP (stdio).

Opened on first need (the first link), on ``127.0.0.1`` and ``root.entry_port`` (0: any free port); it
serves ``gateway.secrets.page``'s routes and those added before it opens (the operator console and its
approval pages), and is closed with the runtime.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Self

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from gateway.secrets.broker import SecretBroker
from gateway.secrets.page import secret_routes

__all__ = ["LoopbackListener"]

_START_S = 10.0
_STOP_S = 5.0


class _Quiet(uvicorn.Server):
    """uvicorn without signal handling of its own (the gateway's serve loop owns the signals)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LoopbackListener:
    def __init__(self, broker: SecretBroker, port: int = 0) -> None:
        self._broker = broker
        self._port = port
        self._tg: anyio.abc.TaskGroup | None = None
        self._server: _Quiet | None = None
        self._url: str | None = None
        self._lock = anyio.Lock()
        self._stopped = anyio.Event()  # set when the server's serve() has returned
        self._extra: list[BaseRoute] = []

    def add_routes(self, routes: Sequence[BaseRoute]) -> None:
        """More pages on this listener (the operator console and approval pages), before it opens."""
        self._extra.extend(routes)

    @property
    def url(self) -> str | None:
        return self._url

    async def __aenter__(self) -> Self:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        if self._server is not None:
            self._server.should_exit = True
            # (uvicorn never clears its `started` flag: waiting on it made every stop take the whole bound)
            with anyio.move_on_after(_STOP_S, shield=True):
                await self._stopped.wait()
        tg.cancel_scope.cancel()
        await tg.__aexit__(exc_type, exc, tb)

    async def start(self) -> str:
        """The listener's base URL, opening it first when needed."""
        async with self._lock:
            if self._url is not None:
                return self._url
            if self._tg is None:
                raise RuntimeError("use LoopbackListener as an async context manager")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self._port))
            sock.listen(16)
            port = sock.getsockname()[1]
            app = Starlette(routes=[*secret_routes(self._broker), *self._extra])
            config = uvicorn.Config(
                app, log_config=None, access_log=False, lifespan="off", http="httptools", server_header=False
            )
            server = _Quiet(config)
            self._server = server

            async def serve() -> None:
                try:
                    await server.serve(sockets=[sock])
                finally:
                    sock.close()
                    self._stopped.set()

            self._tg.start_soon(serve)
            with anyio.fail_after(_START_S):
                while not server.started:  # noqa: ASYNC110 - uvicorn exposes only a flag
                    await anyio.sleep(0.01)
            self._url = f"http://127.0.0.1:{port}"
            return self._url
