"""`Upstream`: one supervised connection to one upstream MCP server.

The connection lives in a supervisor task (`run`) that owns every SDK object, so an upstream
failure never propagates into the caller's task group. Only the supervisor connects, so at
most one connection attempt is ever in flight, however many callers wait. Callers share the
published connection and report what they learn about it (`Connection.mark_lost`).

Elicitation is relayed per call (`call_tool(elicit=...)`), but only where the question can be
attributed without guessing: see `upstream._elicit`. Sampling and roots are not relayed.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Protocol, Self

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from upstream._backoff import Backoff
from upstream._calls import Outcome, call_params, classify, list_all_tools
from upstream._connection import DRAIN_S, Connection
from upstream._elicit import ElicitCallback, ElicitRouter
from upstream._errors import (
    UpstreamAmbiguous,
    UpstreamCallTimeout,
    UpstreamClosed,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamSessionLost,
    UpstreamUnavailable,
)
from upstream._health import Stats, UpstreamHealth, UpstreamState, utc_now_iso
from upstream._keepalive import keepalive
from upstream._settings import UpstreamSettings
from upstream._transport import LOCAL_MARK, open_client

__all__ = ["ProgressCallback", "ToolsChangedCallback", "Upstream"]

logger = logging.getLogger("upstream")

_MAX_NOT_SENT_RETRIES = 3


class ProgressCallback(Protocol):
    """Receives the upstream's notifications/progress for one call."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


ToolsChangedCallback = Callable[[tuple[types.Tool, ...]], Awaitable[None]]
"""Called with the new tool list after notifications/tools/list_changed, and whenever a
(re)connect publishes a list that differs from the previous one (the first connect included)."""


def _leaf_error_class(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        data = exc.data
        if isinstance(data, Mapping) and LOCAL_MARK in data:
            return str(data.get("error_class", "TransportError"))
        return f"MCPError({exc.code})"
    return type(exc).__name__


def _dump(tools: tuple[types.Tool, ...] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in tools]


class Upstream:
    """Supervised client of one upstream MCP server.

    Use `async with Upstream(settings) as up:` (the supervisor runs in an internal task group),
    or start `up.run` in your own task group (`await tg.start(up.run)`). Several may coexist.
    """

    def __init__(
        self,
        settings: UpstreamSettings,
        *,
        on_tools_changed: ToolsChangedCallback | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self._on_tools_changed = on_tools_changed
        self.backoff = backoff or Backoff(
            initial_s=settings.backoff_initial_s,
            max_s=settings.backoff_max_s,
            multiplier=settings.backoff_multiplier,
            jitter=settings.backoff_jitter,
        )
        self._stats = Stats()
        self._state: UpstreamState = "stopped"
        self._running = False
        self._conn: Connection | None = None
        self._ready = anyio.Event()
        self._tools: tuple[types.Tool, ...] | None = None
        self._protocol_version: str | None = None
        self._server_info: types.Implementation | None = None
        self._exit_stack: AsyncExitStack | None = None
        self._changed = anyio.Event()

    @property
    def name(self) -> str:
        return self.settings.name

    def _signal(self) -> None:
        """Wake `wait_for` waiters: something shown by `health()` changed."""
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[UpstreamHealth], bool]) -> UpstreamHealth:
        """Wait until `predicate(health())` holds (unbounded: wrap it in `anyio.fail_after`)."""
        while True:
            changed = self._changed
            health = self.health()
            if predicate(health):
                return health
            await changed.wait()

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs first on exit: stop the supervisor
            await tg.start(self.run)
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise the connection until cancelled. Never raises anything but cancellation."""
        if self._running:
            raise RuntimeError(f"upstream {self.name!r} is already running")
        self._running = True
        self._state = "starting"
        try:
            task_status.started()
            while True:
                conn = await self._attempt()
                if conn.lost_reason == "session-not-found":
                    continue  # the upstream is alive and answered definitively: re-initialise now
                self._state = "down"
                self._signal()
                await anyio.sleep(self.backoff.fail())
        finally:
            self._running = False
            self._state = "stopped"
            self._conn = None
            self._ready.set()  # wake waiters so they see the stop
            self._signal()

    async def _attempt(self) -> Connection:
        """One connection attempt; returns when it failed or, once verified, when it is lost."""
        router = ElicitRouter(upstream=self.name, timeout_s=self.settings.elicitation_timeout_s)
        conn = Connection(tag=uuid.uuid4().hex, router=router)
        stats = self._stats
        stats.connect_attempts += 1
        self._state = "starting" if stats.connect_successes == 0 else "reconnecting"
        stats.attempts_in_flight += 1
        stats.attempts_in_flight_max = max(stats.attempts_in_flight_max, stats.attempts_in_flight)
        in_flight = True
        self._signal()
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.settings.connect_timeout_s) as scope:
                async with open_client(
                    self.settings,
                    tag=conn.tag,
                    on_lost=conn.mark_lost,
                    message_handler=conn.handle_message,
                    elicitation_callback=router,
                ) as client:
                    tools = await list_all_tools(client.session)
                    scope.deadline = math.inf
                    stats.attempts_in_flight -= 1
                    in_flight = False
                    # Functional success: only now may the backoff reset.
                    self.backoff.reset()
                    stats.connect_successes += 1
                    conn.client = client
                    conn.connected_since = utc_now_iso()
                    self._protocol_version = client.protocol_version
                    self._server_info = client.server_info
                    changed = _dump(tools) != _dump(self._tools)
                    self._tools = tools
                    self._conn = conn
                    self._state = "connected"
                    self._ready.set()
                    self._signal()
                    async with anyio.create_task_group() as conn_tg:
                        conn_tg.start_soon(self._refresh_tools, conn, changed)
                        conn_tg.start_soon(keepalive, conn, self.settings, self._protocol_version)
                        await conn.lost.wait()
                        conn_tg.cancel_scope.cancel()
                    if conn.lost_reason not in (None, "closed", "session-not-found"):
                        stats.record_error(conn.lost_reason)
                    self._state = "reconnecting"
                    self._signal()
                    with anyio.move_on_after(DRAIN_S):
                        await conn.drained()
                    # Closing the client talks to the upstream (e.g. an HTTP session DELETE); a wedged
                    # upstream must not hold the supervisor: bound the teardown like a connect.
                    scope.deadline = anyio.current_time() + self.settings.connect_timeout_s
            if scope.cancelled_caught and conn.client is None:
                stats.record_error("ConnectTimeout")
        except Exception as exc:  # boundary: any upstream failure ends this attempt, never the gateway
            if conn.client is not None and conn.lost.is_set():
                pass  # teardown noise after a loss already recorded below
            else:
                conn.mark_lost(_leaf_error_class(exc))
                stats.record_error(_leaf_error_class(exc))
                logger.warning("upstream %r connection failed: %s", self.name, _leaf_error_class(exc))
        finally:
            if in_flight:
                stats.attempts_in_flight -= 1
            conn.mark_lost(conn.lost_reason or "closed")
            if self._conn is conn:
                self._conn = None
                self._ready = anyio.Event()
        self._signal()
        return conn

    async def _refresh_tools(self, conn: Connection, changed: bool) -> None:
        if changed:
            await self._notify_tools_changed()
        while True:
            await conn.list_changed.wait()
            conn.list_changed = anyio.Event()
            try:
                with anyio.fail_after(self.settings.list_timeout_s):
                    tools = await list_all_tools(conn.session())
            except MCPError as exc:
                outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
                self._stats.record_error(error_class)
                if outcome is not Outcome.REJECTED:
                    conn.mark_lost(error_class)
                    return
                continue
            except (TimeoutError, ValidationError) as exc:
                self._stats.record_error(type(exc).__name__)
                continue
            self._tools = tools
            self._signal()
            await self._notify_tools_changed()

    async def _notify_tools_changed(self) -> None:
        if self._on_tools_changed is None or self._tools is None:
            return
        try:
            await self._on_tools_changed(self._tools)
        except Exception:  # boundary: a faulty gateway callback must not kill the supervisor
            logger.exception("upstream %r: tools-changed callback raised", self.name)

    # ----------------------------------------------------------------- callers

    async def _wait_connection(self) -> Connection:
        """Wait (unbounded: callers bound it) for a live published connection."""
        while True:
            if not self._running:
                raise UpstreamClosed(f"upstream {self.name!r} is not running", upstream=self.name)
            conn = self._conn
            if conn is not None and not conn.lost.is_set():
                return conn
            await self._ready.wait()
            if self._conn is None or self._conn.lost.is_set():
                await anyio.lowlevel.checkpoint()

    async def _acquire(self, started: float) -> Connection:
        remaining = started + self.settings.call_wait_s - anyio.current_time()
        conn: Connection | None = None
        with anyio.move_on_after(max(0.0, remaining)):
            conn = await self._wait_connection()
        if conn is None:
            raise self._unavailable(UpstreamUnavailable, started, "no working connection")
        return conn

    def _unavailable(self, cls: type[UpstreamUnavailable], started: float, why: str) -> UpstreamUnavailable:
        waited = anyio.current_time() - started
        return cls(
            f"upstream {self.name!r} unavailable after {waited:.1f}s: {why}",
            upstream=self.name,
            state=self._state,
            waited_s=waited,
            last_error=self._stats.last_error_class,
        )

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, unchanged, all pages. Served from the cache (refreshed on every
        (re)connect and on list_changed); during an outage the last known list is returned."""
        tools = self._tools
        if tools is None:
            await self._acquire(anyio.current_time())
            tools = self._tools or ()
        return list(tools)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> types.CallToolResult:
        """Relay one tools/call and return the upstream's result unchanged (isError included).

        `elicit` answers the upstream's elicitation requests for this call, when they can be
        attributed to it (`upstream._elicit`); without it the upstream is told the caller cannot.

        Raises UpstreamUnavailable (nothing sent), UpstreamAmbiguous (may have run; not replayed),
        UpstreamRejected (JSON-RPC error from the upstream), UpstreamProtocolError, UpstreamClosed.
        """
        request = types.CallToolRequest(params=call_params(name, arguments, meta))
        started = anyio.current_time()
        session_retried = False
        not_sent = 0
        while True:
            conn = await self._acquire(started)
            session = conn.session()
            sent_at = anyio.current_time()
            result: types.CallToolResult | None = None
            conn.call_started()
            routed = conn.router.enter(elicit, deadline=sent_at + self.settings.call_timeout_s)
            answered = False  # stays False if cancelled or timed out: the upstream may still run it
            try:
                with anyio.move_on_after(self.settings.call_timeout_s):
                    result = await session.send_request(
                        request, types.CallToolResult, progress_callback=progress
                    )
                answered = result is not None
            except MCPError as exc:
                answered = True
                outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
                if outcome is Outcome.REJECTED:
                    raise UpstreamRejected(
                        upstream=self.name,
                        method="tools/call",
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
                    self._stats.session_not_found_retries += 1
                    self._signal()
                    continue
                conn.mark_lost(error_class)
                raise self._ambiguous(name, sent_at, error_class) from exc
            except ValidationError as exc:
                answered = True
                raise UpstreamProtocolError(
                    f"upstream {self.name!r} sent an invalid tools/call result",
                    upstream=self.name,
                    method="tools/call",
                ) from exc
            finally:
                conn.router.leave(routed, answered=answered)
                conn.call_ended()
            if result is None:
                self._stats.ambiguous_losses += 1
                self._stats.record_error("TimeoutError")
                self._signal()
                raise UpstreamCallTimeout(
                    f"upstream {self.name!r}: {name} did not answer within {self.settings.call_timeout_s}s",
                    upstream=self.name,
                    tool=name,
                    elapsed_s=anyio.current_time() - sent_at,
                    timeout_s=self.settings.call_timeout_s,
                )
            return result

    def _ambiguous(self, tool: str, sent_at: float, error_class: str) -> UpstreamAmbiguous:
        self._stats.ambiguous_losses += 1
        self._stats.record_error(error_class)
        self._signal()
        elapsed = anyio.current_time() - sent_at
        return UpstreamAmbiguous(
            f"upstream {self.name!r}: connection lost during {tool} after {elapsed:.1f}s; "
            "the call may or may not have run and was not re-sent",
            upstream=self.name,
            tool=tool,
            elapsed_s=elapsed,
            cause=error_class,
        )

    # ----------------------------------------------------------------- health

    def health(self) -> UpstreamHealth:
        stats = self._stats
        info = self._server_info
        conn = self._conn
        state = self._state
        if state == "connected" and (conn is None or conn.lost.is_set()):
            state = "reconnecting"  # known lost; the old client may still be tearing down
        return UpstreamHealth(
            name=self.name,
            transport=self.settings.transport,
            state=state,
            protocol_version=self._protocol_version,
            server_name=info.name if info is not None else None,
            server_version=info.version if info is not None else None,
            tool_count=len(self._tools) if self._tools is not None else None,
            connected_since=conn.connected_since if conn is not None else None,
            connect_attempts=stats.connect_attempts,
            connect_successes=stats.connect_successes,
            attempts_in_flight_max=stats.attempts_in_flight_max,
            ambiguous_losses=stats.ambiguous_losses,
            session_not_found_retries=stats.session_not_found_retries,
            last_error_class=stats.last_error_class,
            last_error_at=stats.last_error_at,
        )
