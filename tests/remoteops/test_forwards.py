"""Managed forwards against the real sshd: -L, -R and -D carry real traffic, names are reused, close never
signals a process that is not the recorded one, a port in use fails cleanly."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import anyio.abc
import pytest

from remoteops import RemoteOps
from remoteops._process import supervised_child
from remoteops._state import StateStore
from remoteops.forwards.errors import ForwardConflict, ForwardNotFound, ForwardStartFailed
from remoteops.forwards.manager import ForwardManager
from remoteops.forwards.models import ForwardSettings, ForwardSpec
from remoteops.forwards.proc import find_by_argv, identity_alive, identity_of, stop_process
from remoteops.forwards.store import FORWARDS, StateForwardStore
from tests.remoteops.conftest import OpsFactory

pytestmark = [pytest.mark.anyio, pytest.mark.sshd, pytest.mark.slow]

_LIMIT_S = 30


async def _serve_http(listener: anyio.abc.SocketListener, body: bytes) -> None:
    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            request = b""
            try:
                while b"\r\n\r\n" not in request:
                    request += await stream.receive()
                await stream.send(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return  # a health check's bare connect: opened and closed without a request

    await listener.serve(handle)


async def _http_get(stream: anyio.abc.ByteStream) -> bytes:
    await stream.send(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    reply = b""
    try:
        while True:
            reply += await stream.receive()
    except anyio.EndOfStream:
        return reply


async def _recv_exact(stream: anyio.abc.ByteStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        data += await stream.receive(size - len(data))
    return data


@pytest.fixture
async def ops(ops_factory: OpsFactory) -> AsyncIterator[RemoteOps]:
    async with ops_factory() as instance:
        yield instance


@pytest.fixture
def state_root(tmp_path: Path) -> Path:
    return tmp_path / "state"


ManagerFactory = Callable[[], ForwardManager]


@pytest.fixture
async def manager_factory(
    ops: RemoteOps, settings: object, state_root: Path
) -> AsyncIterator[ManagerFactory]:
    """A fresh ForwardManager over the same state directory (a 'gateway restart'); every forward process
    still recorded at the end is stopped by its identity."""
    from remoteops import TransportSettings

    assert isinstance(settings, TransportSettings)

    def factory() -> ForwardManager:
        store = StateForwardStore(StateStore(state_root))
        return ForwardManager(ops, settings, ForwardSettings(), store, state_root / "forward-logs")

    yield factory
    if await anyio.Path(state_root).exists():
        store = StateStore(state_root)
        await store.open()
        for record in (await store.load_all(FORWARDS)).values():
            await stop_process(record.process, grace_s=2)


@pytest.fixture
async def http_server() -> AsyncIterator[tuple[int, bytes]]:
    body = f"hello-{secrets.token_hex(4)}".encode()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(_serve_http, listener, body)
        yield int(listener.extra(anyio.abc.SocketAttribute.local_port)), body  # noqa: S610 - anyio, not Django
        tg.cancel_scope.cancel()


async def test_a_local_forward_serves_http_requests_from_the_targets_loopback(
    manager_factory: ManagerFactory, http_server: tuple[int, bytes]
) -> None:
    port, body = http_server
    with anyio.fail_after(_LIMIT_S):
        async with manager_factory() as forwards:
            spec = ForwardSpec(target="plain", kind="local", dest_host="127.0.0.1", dest_port=port)
            created = await forwards.create(spec)
            fwd = created.forward
            assert not created.reused
            assert fwd.bind_port != port
            for _ in range(3):
                async with await anyio.connect_tcp("127.0.0.1", fwd.bind_port) as stream:
                    reply = await _http_get(stream)
                assert reply.startswith(b"HTTP/1.0 200")
                assert reply.endswith(body)
            status = await forwards.status(fwd.id)
            assert status.last_health is not None
            assert status.last_health.healthy
            assert [c.name for c in status.last_health.checks] == ["process", "local_listener"]
            closed = await forwards.close(fwd.id)
            assert (closed.outcome, closed.signalled, closed.record_removed) == ("terminated", True, True)
            with pytest.raises(OSError):  # noqa: PT011 - anyio wraps the refusal in a plain OSError
                await anyio.connect_tcp("127.0.0.1", fwd.bind_port)
            with pytest.raises(ForwardNotFound):
                await forwards.close(fwd.id)


_CLIENT = (
    "import socket,sys\n"
    "s=socket.create_connection(('127.0.0.1',int(sys.argv[1])),10)\n"
    "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
    "d=b''\n"
    "while True:\n"
    "    c=s.recv(65536)\n"
    "    if not c: break\n"
    "    d+=c\n"
    "sys.stdout.write(d.decode())\n"
)


async def test_a_remote_forward_exposes_a_gateway_side_server_to_the_target(
    manager_factory: ManagerFactory, ops: RemoteOps, http_server: tuple[int, bytes]
) -> None:
    port, body = http_server
    with anyio.fail_after(_LIMIT_S):
        async with manager_factory() as forwards:
            spec = ForwardSpec(target="plain", kind="remote", dest_host="127.0.0.1", dest_port=port)
            fwd = (await forwards.create(spec)).forward
            assert fwd.bind_port > 0  # picked by sshd and reported
            result = await ops.run("plain", ["python3", "-c", _CLIENT, str(fwd.bind_port)], timeout_s=20)
            assert result.exit_code == 0, result.stderr
            assert result.stdout.endswith(body.decode())
            status = await forwards.status(fwd.id)
            assert status.last_health is not None
            checks = {c.name: c.ok for c in status.last_health.checks}
            assert checks == {"process": True, "remote_listener": True}
            assert (await forwards.close(fwd.id)).outcome == "terminated"
            # sshd drops the remote listener once it has seen the forward's connection end, a moment after
            # the close (a loaded machine can serve one more connect, accepted and then closed at once)
            while _tcp_listeners(fwd.bind_port, tables=("tcp", "tcp6")):  # noqa: ASYNC110 - sshd's socket
                await anyio.sleep(0.02)
            status_after = await ops.run(
                "plain", ["python3", "-c", _CLIENT, str(fwd.bind_port)], timeout_s=20
            )
            assert status_after.exit_code != 0


async def test_a_dynamic_forward_carries_a_socks5_connect(
    manager_factory: ManagerFactory, http_server: tuple[int, bytes]
) -> None:
    port, body = http_server
    with anyio.fail_after(_LIMIT_S):
        async with manager_factory() as forwards:
            fwd = (await forwards.create(ForwardSpec(target="plain", kind="dynamic"))).forward
            async with await anyio.connect_tcp("127.0.0.1", fwd.bind_port) as stream:
                await stream.send(b"\x05\x01\x00")
                assert await _recv_exact(stream, 2) == b"\x05\x00"
                await stream.send(
                    b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + port.to_bytes(2, "big")
                )
                reply = await _recv_exact(stream, 10)
                assert reply[:2] == b"\x05\x00"  # succeeded
                answer = await _http_get(stream)
            assert answer.endswith(body)
            status = await forwards.status(fwd.id)
            assert status.last_health is not None
            assert [(c.name, c.ok) for c in status.last_health.checks] == [
                ("process", True),
                ("local_listener", True),
                ("socks_handshake", True),
            ]
            await forwards.close(fwd.id)


async def test_a_named_forward_is_reused_with_one_process_and_a_different_spec_conflicts(
    manager_factory: ManagerFactory,
) -> None:
    with anyio.fail_after(_LIMIT_S):
        async with manager_factory() as forwards:
            spec = ForwardSpec(target="plain", kind="dynamic")
            first = await forwards.create(spec, name="socks")
            again = await forwards.create(spec, name="socks")
            assert again.reused
            assert not first.reused
            assert again.forward.id == first.forward.id
            assert again.forward.pid == first.forward.pid
            views = await forwards.list()
            assert [v.id for v in views] == [first.forward.id]
            argv = list(identity_of(first.forward.pid).argv)  # type: ignore[union-attr]
            assert await anyio.to_thread.run_sync(find_by_argv, argv) == [first.forward.pid]
            other = ForwardSpec(target="plain", kind="dynamic", bind_address="127.0.0.2")
            with pytest.raises(ForwardConflict):
                await forwards.create(other, name="socks")
            await forwards.close(first.forward.id)


async def test_close_does_not_signal_an_unrelated_process_at_the_recorded_pid(
    manager_factory: ManagerFactory, state_root: Path
) -> None:
    with anyio.fail_after(_LIMIT_S):
        async with manager_factory() as forwards:
            fwd = (await forwards.create(ForwardSpec(target="plain", kind="dynamic"))).forward
        store = StateStore(state_root)
        await store.open()
        record = await store.get(FORWARDS, fwd.id)
        assert record is not None
        original = record.process
        async with supervised_child(["sleep", "60"]) as unrelated:
            # the PID now names another process; the recorded start time and argv stay the forward's
            forged = record.model_copy(update={"process": original.model_copy(update={"pid": unrelated.pid})})
            await store.put(FORWARDS, fwd.id, forged)
            async with manager_factory() as restarted:
                view = next(v for v in await restarted.list() if v.id == fwd.id)
                assert (view.state, view.lost_reason) == ("lost", "identity_mismatch")
                closed = await restarted.close(fwd.id)
                assert closed.outcome == "identity_mismatch"
                assert not closed.signalled
                assert unrelated.returncode is None
                unrelated_identity = identity_of(unrelated.pid)
                assert unrelated_identity is not None
                assert identity_alive(unrelated_identity) is True
        assert identity_alive(original) is True  # the real forward was not touched either
        assert await stop_process(original, grace_s=2) == "terminated"


async def test_a_forward_to_a_port_in_use_fails_cleanly_and_leaves_nothing(
    manager_factory: ManagerFactory, state_root: Path
) -> None:
    with socket.socket() as busy, anyio.fail_after(_LIMIT_S):
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        async with manager_factory() as forwards:
            spec = ForwardSpec(
                target="plain", kind="local", bind_port=port, dest_host="127.0.0.1", dest_port=22
            )
            with pytest.raises(ForwardStartFailed) as info:
                await forwards.create(spec)
            assert info.value.reason == "port_in_use"
            assert await forwards.list() == []
        logs = state_root / "forward-logs"
        assert list(logs.iterdir()) == []
        leftovers = [
            pid
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit())
            if (ident := identity_of(pid)) is not None and str(logs) in " ".join(ident.argv)
        ]
        assert leftovers == []


async def test_a_non_loopback_bind_needs_operator_configuration(manager_factory: ManagerFactory) -> None:
    from remoteops import PolicyDenied

    async with manager_factory() as forwards:
        with pytest.raises(PolicyDenied) as info:
            await forwards.create(ForwardSpec(target="plain", kind="dynamic", bind_address="0.0.0.0"))  # noqa: S104
        assert info.value.reason == "bind_not_allowed"


def _tcp_listeners(port: int, tables: tuple[str, ...] = ("tcp",)) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) listening on ``port`` in this namespace."""
    found = set()
    for table in tables:
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


async def test_a_non_loopback_bind_the_operator_allowed_is_created_and_serves(
    ops: RemoteOps, settings: object, state_root: Path, http_server: tuple[int, bytes]
) -> None:
    from remoteops import TransportSettings

    assert isinstance(settings, TransportSettings)
    port, body = http_server
    wildcard = "0.0.0.0"  # noqa: S104 - the code's non-loopback case; the test's traffic stays on loopback
    allowed = ForwardSettings(allowed_bind_addresses=(wildcard,))
    store = StateForwardStore(StateStore(state_root))
    with anyio.fail_after(_LIMIT_S):
        async with ForwardManager(ops, settings, allowed, store, state_root / "forward-logs") as forwards:
            spec = ForwardSpec(
                target="plain", kind="local", bind_address=wildcard, dest_host="127.0.0.1", dest_port=port
            )
            fwd = (await forwards.create(spec)).forward
            try:
                assert fwd.bind_address == wildcard
                assert _tcp_listeners(fwd.bind_port) == {"00000000"}  # bound to the wildcard, not loopback
                async with await anyio.connect_tcp("127.0.0.1", fwd.bind_port) as stream:
                    reply = await _http_get(stream)
                assert reply.startswith(b"HTTP/1.0 200")
                assert reply.endswith(body)
                status = await forwards.status(fwd.id)
                assert status.last_health is not None
                assert [(c.name, c.ok) for c in status.last_health.checks] == [
                    ("process", True),
                    ("local_listener", True),  # a wildcard listener is checked on loopback
                ]
            finally:
                closed = await forwards.close(fwd.id)
    assert closed.outcome == "terminated"
    assert _tcp_listeners(fwd.bind_port) == set()
