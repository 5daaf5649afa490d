"""`Relay`: send one client request to the upstream under the package's one retry policy.

What provably never ran (not sent; a definitive "session not found", once) is sent again on the next
connection; what may have run is reported (`UpstreamAmbiguous`), never re-sent. Tool calls
(`Upstream.call_tool`), everything else relayed (`UpstreamSurface`: reads, prompt gets,
completions, (un)subscriptions) and the upstream's own tasks (`UpstreamTasks`: a task-augmented
tools/call, tasks/get, tasks/result, tasks/list, tasks/cancel, tasks/update, sent raw by `Relay.run`)
go through the same `Relay`, so they share these fault semantics.
It works on the supervisor's connection (`upstream._supervisor`) and knows nothing of the facade.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol, TypeVar

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from upstream._calls import Outcome, classify
from upstream._connection import Abandoned, Connection
from upstream._elicit import ElicitCallback
from upstream._errors import (
    UpstreamAmbiguous,
    UpstreamCallTimeout,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamSessionLost,
    UpstreamUnavailable,
)
from upstream._liveness import LIVENESS_LOST
from upstream._settings import UpstreamSettings
from upstream._supervisor import Supervisor

__all__ = ["ProgressCallback", "Relay", "RelayedRequest"]

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")

RelayedRequest = (
    types.CallToolRequest
    | types.ReadResourceRequest
    | types.GetPromptRequest
    | types.CompleteRequest
    | types.SubscribeRequest
    | types.UnsubscribeRequest
    | types.ListResourcesRequest
    | types.ListResourceTemplatesRequest
    | types.ListPromptsRequest
)
"""The client requests this package relays (anything an MCP server serves to a client)."""

_MAX_NOT_SENT_RETRIES = 3


class ProgressCallback(Protocol):
    """Receives the upstream's notifications/progress for one call."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class Relay:
    """The retry policy of one upstream, over its supervisor's current connection."""

    def __init__(self, settings: UpstreamSettings, sup: Supervisor) -> None:
        self._settings = settings
        self._sup = sup

    @property
    def name(self) -> str:
        return self._settings.name

    async def acquire(self, started: float) -> Connection:
        """A working connection, waited for until `call_wait_s` after `started`; else
        `UpstreamUnavailable`."""
        remaining = started + self._settings.call_wait_s - anyio.current_time()
        conn: Connection | None = None
        with anyio.move_on_after(max(0.0, remaining)):
            conn = await self._sup.wait_connection()
        if conn is None:
            raise self._unavailable(UpstreamUnavailable, started, "no working connection")
        return conn

    def _unavailable(self, cls: type[UpstreamUnavailable], started: float, why: str) -> UpstreamUnavailable:
        waited = anyio.current_time() - started
        return cls(
            f"upstream {self.name!r} unavailable after {waited:.1f}s "
            f"(call_wait_s = {self._settings.call_wait_s:g}s): {why}",
            upstream=self.name,
            state=self._sup.state,
            waited_s=waited,
            last_error=self._sup.stats.last_error_class,
        )

    async def __call__(
        self,
        request: RelayedRequest,
        result_type: type[R],
        *,
        subject: str,
        limit_s: float | None = None,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> R:
        """Send one request and return the upstream's result unchanged, under the one retry policy
        (module docstring). `subject` names the request in errors (a tool name, a resource URI, a
        prompt name); `limit_s` bounds the answer (default `call_timeout_s`; past it:
        `UpstreamCallTimeout`).

        Raises UpstreamUnavailable (nothing sent), UpstreamAmbiguous (may have run; not replayed),
        UpstreamRejected (JSON-RPC error from the upstream), UpstreamProtocolError, UpstreamClosed.
        """

        def send(session: ClientSession) -> Awaitable[R]:
            return session.send_request(request, result_type, progress_callback=progress)

        return await self.run(send, method=request.method, subject=subject, limit_s=limit_s, elicit=elicit)

    async def run(
        self,
        send: Callable[[ClientSession], Awaitable[T]],
        *,
        method: str,
        subject: str,
        limit_s: float | None = None,
        elicit: ElicitCallback | None = None,
    ) -> T:
        """`send(session)` on the current connection under the one retry policy: what `__call__` does
        for a typed request, for any way of sending one (the upstream's own tasks are sent raw)."""
        started = anyio.current_time()
        session_retried = False
        not_sent = 0
        while True:
            conn = await self.acquire(started)
            session = conn.session()
            sent_at = anyio.current_time()
            limit = self._settings.call_timeout_s if limit_s is None else limit_s
            routed = conn.router.enter(elicit, deadline=sent_at + limit)
            answered = False  # stays False if cancelled or abandoned: the upstream may still run it

            result: T | None = None
            try:
                with anyio.move_on_after(limit):
                    result = await conn.request(partial(send, session))
                answered = result is not None
            except Abandoned as exc:
                raise self._ambiguous(subject, sent_at, exc.reason) from None
            except MCPError as exc:
                answered = True
                outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
                if outcome is Outcome.REJECTED:
                    raise UpstreamRejected(
                        upstream=self.name,
                        method=method,
                        code=exc.code,
                        message=exc.message,
                        data=exc.data,
                    ) from exc
                if outcome is Outcome.NOT_SENT:
                    conn.mark_lost(error_class)
                    not_sent += 1
                    if not_sent > _MAX_NOT_SENT_RETRIES:
                        raise self._unavailable(UpstreamUnavailable, started, error_class) from exc
                    continue
                if outcome is Outcome.SESSION_NOT_FOUND:
                    conn.mark_lost("session-not-found")
                    if session_retried:
                        raise self._unavailable(
                            UpstreamSessionLost, started, "session not found twice in a row"
                        ) from exc
                    session_retried = True
                    self._sup.stats.session_not_found_retries += 1
                    self._sup.signal()
                    continue
                conn.mark_lost(error_class)
                raise self._ambiguous(subject, sent_at, error_class) from exc
            except ValidationError as exc:
                answered = True
                raise UpstreamProtocolError(
                    f"upstream {self.name!r} sent an invalid {method} result",
                    upstream=self.name,
                    method=method,
                ) from exc
            finally:
                conn.router.leave(routed, answered=answered)
            if result is None:
                raise self._timed_out(subject, sent_at, limit)
            return result

    def _timed_out(self, tool: str, sent_at: float, limit: float) -> UpstreamCallTimeout:
        self._sup.stats.ambiguous_losses += 1
        self._sup.stats.record_error(
            "TimeoutError", f"{tool} did not answer within call_timeout_s = {limit:g}s"
        )
        self._sup.signal()
        elapsed = anyio.current_time() - sent_at
        return UpstreamCallTimeout(
            f"upstream {self.name!r}: {tool} did not answer within call_timeout_s = {limit:g}s "
            f"(gave up after {elapsed:.1f}s); it may or may not have run and was not re-sent",
            upstream=self.name,
            tool=tool,
            elapsed_s=elapsed,
            timeout_s=limit,
        )

    def _ambiguous(self, tool: str, sent_at: float, error_class: str) -> UpstreamAmbiguous:
        stats = self._sup.stats
        stats.ambiguous_losses += 1
        if error_class != stats.last_error_class:
            stats.record_error(error_class)
        self._sup.signal()
        elapsed = anyio.current_time() - sent_at
        why = ""
        if error_class == LIVENESS_LOST:
            limit = self._settings.liveness_timeout_s
            why = f" (no liveness probe answered within liveness_timeout_s = {limit:g}s)"
        return UpstreamAmbiguous(
            f"upstream {self.name!r}: connection lost during {tool} after {elapsed:.1f}s{why}; "
            "the call may or may not have run and was not re-sent",
            upstream=self.name,
            tool=tool,
            elapsed_s=elapsed,
            cause=error_class,
        )
