"""`DelegatingReadStream`: a read stream of the SDK's transports, wrapped to watch or filter what it yields.

Both ends of the project sit between an SDK transport and an SDK session: this package watches an
upstream's read stream for its end (`upstream._transport`), the gateway answers the unparseable lines on
its own stdin (`gateway.serving.stdio`). Both need the same delegating shell around the inner stream —
iteration, closing, the async context, and `last_context` (the sender context the SDK reads from
context-aware streams) — so it lives here once; a subclass overrides `receive` only.
"""

from __future__ import annotations

import contextvars
from types import TracebackType
from typing import Generic, Self, TypeVar

import anyio
from mcp.shared._stream_protocols import ReadStream  # the transports' stream type; no public name

__all__ = ["DelegatingReadStream"]

T = TypeVar("T")


class DelegatingReadStream(Generic[T]):
    """A read stream that passes everything through to ``inner``; override `receive` to change that."""

    def __init__(self, inner: ReadStream[T]) -> None:
        self._inner = inner

    @property
    def last_context(self) -> contextvars.Context | None:
        """The sender context of the last item (the SDK reads it from context-aware streams)."""
        context: contextvars.Context | None = getattr(self._inner, "last_context", None)
        return context

    async def receive(self) -> T:
        return await self._inner.receive()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()
