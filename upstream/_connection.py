"""One connection generation to an upstream, shared by the supervisor and the callers.

Requests on a connection (relayed calls, liveness probes, tools/list refreshes) run in the
connection's own task group (`Connection.request`); the caller only waits for the outcome, under its
own cancel scope. So a caller is released at its deadline, or at the moment the connection is declared
lost, even when the SDK would first spend seconds on a courtesy `notifications/cancelled` to an
upstream that does not read it: that cleanup finishes in the background, bounded by the teardown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession, IncomingMessage

from upstream._elicit import ElicitRouter
from upstream._surface import SurfaceNotices

__all__ = ["DRAIN_S", "Abandoned", "Connection"]

T = TypeVar("T")

DRAIN_S: Final = 2.0
"""After a loss, how long the supervisor lets in-flight calls settle before closing the client:
on a dead HTTP upstream each pending POST then fails its own connect and is provably not sent,
instead of being cut off by the teardown (which would make it ambiguous). Skipped when the loss
was declared by liveness: a wedged upstream answers nothing, and its callers were released already."""


class Abandoned(Exception):
    """The connection was aborted (liveness) or closed while the request was in flight (`reason`).
    The request itself is cancelled in the background; it may have run."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False)
class Connection:
    """One connection generation. `lost` is set once, by whoever first learns it is gone."""

    tag: str
    router: ElicitRouter
    lost: anyio.Event = field(default_factory=anyio.Event)
    lost_reason: str | None = None
    aborted: bool = False
    """The loss was declared by liveness: callers waiting on this connection were released at once."""
    list_changed: anyio.Event = field(default_factory=anyio.Event)
    notices: SurfaceNotices = field(default_factory=SurfaceNotices)
    """Resource/prompt notifications received on this connection, handed on by the supervisor."""
    client: Client | None = None
    connected_since: str | None = None
    requests: anyio.abc.TaskGroup | None = None
    in_flight: int = 0
    idle: anyio.Event = field(default_factory=anyio.Event)
    _waiters: set[anyio.CancelScope] = field(default_factory=set)

    def _started(self) -> None:
        self.in_flight += 1
        if self.idle.is_set():
            self.idle = anyio.Event()

    def _ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    async def drained(self) -> None:
        if self.in_flight:
            await self.idle.wait()

    def session(self) -> ClientSession:
        if self.client is None:  # pragma: no cover - only verified connections are published
            raise RuntimeError("connection not established")
        return self.client.session

    def mark_lost(self, reason: str, *, abort: bool = False) -> None:
        """Record the loss (first reason wins). `abort` also releases every caller waiting on a request
        now (liveness: the upstream answers nothing, waiting longer cannot help)."""
        if not self.lost.is_set():
            self.lost_reason = reason
            self.aborted = abort
            self.lost.set()
            if abort:
                for scope in self._waiters:
                    scope.cancel()

    async def request(self, send: Callable[[], Awaitable[T]]) -> T:
        """Run ``send()`` on this connection and return its result or raise its exception.

        Waits without a bound of its own: the caller bounds it with a cancel scope, and when that scope
        (or any cancellation of the caller) ends the wait, the request is cancelled in the background.
        Raises `Abandoned` when the connection is aborted first, or closes under the request.
        """
        group = self.requests
        if group is None:  # pragma: no cover - only published connections carry requests
            raise RuntimeError("connection not published")
        if self.aborted:
            raise Abandoned(self.lost_reason or "closed")
        result: list[T] = []
        error: list[Exception] = []
        done = anyio.Event()
        work = anyio.CancelScope()

        async def run() -> None:
            self._started()
            try:
                with work:
                    try:
                        result.append(await send())
                    except Exception as exc:  # handed to the waiting caller, raised there
                        error.append(exc)
            finally:
                self._ended()
                done.set()

        group.start_soon(run)
        waiter = anyio.CancelScope()  # cancelled by an abort (`mark_lost(abort=True)`)
        self._waiters.add(waiter)
        try:
            with waiter:
                await done.wait()
        finally:
            self._waiters.discard(waiter)
            if not done.is_set():
                work.cancel()  # the caller's deadline, its cancellation, or the abort
        if result:
            return result[0]
        if error:
            raise error[0]
        raise Abandoned(self.lost_reason or "closed")

    async def handle_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed.set()
        else:
            self.notices.note(message)
        await anyio.lowlevel.checkpoint()
