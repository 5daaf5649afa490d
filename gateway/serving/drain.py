"""A bounded drain for one stdio connection: SIGTERM stops a stdio gateway as it stops an HTTP one.

Over HTTP uvicorn stops accepting and gives in-flight requests ``server.drain_timeout_s`` to finish. Over
stdio the SDK's transport reads stdin in a worker thread that cannot be interrupted, so a cancelled gateway
waited for the client's next line, and calls in flight were cut without an answer. Here:

* :class:`StdioTransport` reads and writes the protocol on private duplicates of fd 0 and fd 1 without
  a thread (``O_NONBLOCK`` + the loop's readiness waits): reading can always be cancelled, and the last
  answers are flushed before the process exits.
* :class:`Drain` sits between the transport and the server and tracks every request in flight (answered
  by the server's response or error, or withdrawn by the client's ``notifications/cancelled``). On
  :meth:`Drain.stop` it reads nothing more; :meth:`Drain.settle` waits (bounded by the caller) until no
  request is in flight; :meth:`Drain.answer_rest` answers what is still running with a shutdown error —
  a ``tools/call`` with the gateway's own ``isError`` result (``transport_lost``: the call may have run,
  ``details.reason = "gateway_shutdown"``), anything else with a JSON-RPC error — and drops whatever
  answer the server still sends for those ids afterwards, so no request gets two answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self

import anyio
import mcp_types as types
import structlog
from mcp.shared._context_streams import create_context_streams  # the SDK's own stdio uses these
from mcp.shared._stream_protocols import ReadStream, WriteStream  # server.run() types; no public name
from mcp.shared.message import SessionMessage

from gateway._dispatch import error_result
from gateway._errors import ErrorCode, ToolFailure

__all__ = ["Drain", "StdinLines", "StdioTransport"]

_log = structlog.get_logger("gateway.drain")
_READ = 65536

RequestId = int | str


@contextlib.contextmanager
def _claimed(fd: int, diversion: int) -> Iterator[int]:
    """A private, close-on-exec duplicate of ``fd`` for the protocol; ``fd`` points at ``diversion`` while
    it is held and at the wire again after."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        os.dup2(diversion, fd)
        yield private
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, fd)
        os.close(private)


class StdinLines:
    """Lines (UTF-8, undecodable bytes replaced, as the SDK reads them) from a non-blocking descriptor.
    Every wait is the event loop's readiness wait: cancelling the reader never leaves a thread blocked."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        os.set_blocking(fd, False)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line.decode("utf-8", "replace")
            if self._eof:
                if self._buffer:
                    rest = bytes(self._buffer)
                    self._buffer.clear()
                    return rest.decode("utf-8", "replace")
                raise StopAsyncIteration
            try:
                chunk = os.read(self._fd, _READ)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)


class StdioTransport:
    """The gateway's stdio transport: newline-delimited JSON-RPC on private duplicates of fd 0 and fd 1.

    While it is open fd 0 reads the null device and fd 1 writes to stderr, so commands and children the
    gateway starts read EOF and their stray output never reaches the wire (as with the SDK's transport).
    Reading and writing wait on the event loop, never in a thread: reading can always be cancelled, and
    :meth:`flush` can wait for every answer to be written before the process exits."""

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._written = anyio.Event()
        self.read: ReadStream[SessionMessage | Exception]
        self.write: WriteStream[SessionMessage]

    async def __aenter__(self) -> Self:
        async with contextlib.AsyncExitStack() as stack:
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                stdin = stack.enter_context(_claimed(0, null))
            finally:
                os.close(null)
            stdout = stack.enter_context(_claimed(1, 2))
            os.set_blocking(stdout, False)
            read_writer, self.read = create_context_streams[SessionMessage | Exception](0)
            self.write, write_reader = create_context_streams[SessionMessage](0)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs before the task group is left

            async def reader() -> None:
                async with read_writer:
                    async for line in StdinLines(stdin):
                        try:
                            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except Exception as exc:
                            await read_writer.send(exc)
                            continue
                        await read_writer.send(SessionMessage(message))

            async def writer() -> None:
                try:
                    async with write_reader:
                        async for item in write_reader:
                            text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                            await _write_all(stdout, (text + "\n").encode())
                except OSError as exc:  # the client went away: nothing more can be answered
                    _log.info("stdout_closed", error=type(exc).__name__)
                finally:
                    self._written.set()

            tg.start_soon(reader)
            tg.start_soon(writer)
            self._stack = stack.pop_all()
        return self

    async def flush(self) -> None:
        """Close the write side and return once everything sent before was written (bounded by caller)."""
        await self.write.aclose()
        await self._written.wait()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)


def _shutdown_answer(request_id: RequestId, method: str) -> types.JSONRPCMessage:
    message = "the gateway is shutting down (SIGTERM) and stopped this call at the end of its drain"
    if method == "tools/call":
        failure = ToolFailure(
            ErrorCode.TRANSPORT_LOST,
            f"{message}; it may or may not have run and is not re-run",
            details={"reason": "gateway_shutdown"},
        )
        result = error_result(failure).model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=types.INTERNAL_ERROR, message=message)
    )


class Drain:
    """Wraps one connection's read and write streams; see the module docstring."""

    def __init__(
        self, read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
    ) -> None:
        self._inner_read = read
        self._inner_write = write
        self._pending: dict[RequestId, str] = {}  # request id -> method
        self._closed: set[RequestId] = set()  # answered by the drain: the server's late answer is dropped
        self._stopping = anyio.Event()
        self._receiving: anyio.CancelScope | None = None
        self._idle = anyio.Event()
        self._idle.set()
        self.read: ReadStream[SessionMessage | Exception] = _Reader(self)
        self.write: WriteStream[SessionMessage] = _Writer(self)

    def stop(self) -> None:
        """Read no more requests (the reader waits until the connection is torn down)."""
        self._stopping.set()
        if self._receiving is not None:
            self._receiving.cancel()

    async def settle(self) -> None:
        """Return once no request is in flight (the caller bounds the wait)."""
        await self._idle.wait()

    async def answer_rest(self) -> None:
        """Answer every request still in flight with the shutdown error, once."""
        pending, self._pending = self._pending, {}
        self._idle.set()
        for request_id, method in pending.items():
            self._closed.add(request_id)
            _log.warning("answered_at_shutdown", id=request_id, method=method)
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._inner_write.send(SessionMessage(_shutdown_answer(request_id, method)))

    # -- the two sides --------------------------------------------------------------------------------
    def _seen(self, item: SessionMessage | Exception) -> None:
        if isinstance(item, Exception):
            return
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            self._pending[message.id] = message.method
            self._idle = anyio.Event() if self._idle.is_set() else self._idle
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            params: dict[str, Any] = message.params or {}
            self._done(params.get("requestId"))

    def _done(self, request_id: Any) -> None:
        known = isinstance(request_id, (int, str)) and self._pending.pop(request_id, None) is not None
        if known and not self._pending:
            self._idle.set()

    async def _send(self, item: SessionMessage) -> None:
        message = item.message
        answered: RequestId | None = None
        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            answered = message.id
        if answered is not None and answered in self._closed:
            return  # the drain answered it already
        await self._inner_write.send(item)
        self._done(answered)  # only once it is on its way: a settled drain may close the stream


class _Reader:
    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    @property
    def last_context(self) -> Any:
        return getattr(self._drain._inner_read, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        drain = self._drain
        with anyio.CancelScope() as scope:
            drain._receiving = scope
            if drain._stopping.is_set():
                scope.cancel()
            item = await drain._inner_read.receive()
            drain._seen(item)
            return item
        await anyio.sleep_forever()  # stopped: read nothing more, never end the stream (no cut calls)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._drain._inner_read.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class _Writer:
    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    async def send(self, item: SessionMessage, /) -> None:
        await self._drain._send(item)

    async def aclose(self) -> None:
        await self._drain._inner_write.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None
