"""Serving details that only show up as latency: the listener must give accepted sockets TCP_NODELAY."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.serving.serve import _bind


@pytest.mark.anyio
async def test_accepted_connections_have_tcp_nodelay() -> None:
    # Without it, a response written as headers + body waits for the peer's delayed ACK (~40 ms per call).
    listener = _bind("127.0.0.1", 0)
    port = listener.getsockname()[1]
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        assert await asyncio.wait_for(seen, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
