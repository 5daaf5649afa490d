"""The supervisor of one upstream connection: the connection-generation loop and what it publishes.

The connection lives in a supervisor task (`Supervisor.run`, started by `Upstream.run`) that owns
every SDK object, so an upstream failure never propagates into the caller's task group. Only the
supervisor connects, so at most one connection attempt is ever in flight, however many callers
wait. Callers share the published connection (`Supervisor.wait_connection`) and report what they
learn about it (`Connection.mark_lost`).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from upstream._backoff import Backoff
from upstream._calls import Outcome, classify, list_all_tools
from upstream._connection import DRAIN_S, Connection
from upstream._elicit import ElicitRouter
from upstream._errors import UpstreamClosed
from upstream._health import Stats, UpstreamState, utc_now_iso
from upstream._keepalive import keepalive
from upstream._settings import UpstreamSettings
from upstream._transport import LOCAL_MARK, open_client

__all__ = ["Supervisor", "ToolsChangedCallback"]

logger = logging.getLogger("upstream")

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


class Supervisor:
    """Runs the connection loop of one upstream and holds everything it publishes.

    `Upstream` reads the published state (`state`, `conn`, `tools`, `stats`, ...) for its callers
    and its health snapshot; `signal` wakes whoever waits on `changed`.
    """

    def __init__(
        self,
        settings: UpstreamSettings,
        *,
        backoff: Backoff,
        on_tools_changed: ToolsChangedCallback | None,
    ) -> None:
        self.settings = settings
        self.backoff = backoff
        self._on_tools_changed = on_tools_changed
        self.stats = Stats()
        self.state: UpstreamState = "stopped"
        self.running = False
        self.conn: Connection | None = None
        self._ready = anyio.Event()
        self.tools: tuple[types.Tool, ...] | None = None
        self.protocol_version: str | None = None
        self.server_info: types.Implementation | None = None
        self.changed = anyio.Event()

    @property
    def name(self) -> str:
        return self.settings.name

    def signal(self) -> None:
        """Wake `changed` waiters: something shown by `Upstream.health()` changed."""
        self.changed.set()
        self.changed = anyio.Event()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise the connection until cancelled. Never raises anything but cancellation."""
        if self.running:
            raise RuntimeError(f"upstream {self.name!r} is already running")
        self.running = True
        self.state = "starting"
        try:
            task_status.started()
            while True:
                conn = await self._attempt()
                if conn.lost_reason == "session-not-found":
                    continue  # the upstream is alive and answered definitively: re-initialise now
                self.state = "down"
                self.signal()
                await anyio.sleep(self.backoff.fail())
        finally:
            self.running = False
            self.state = "stopped"
            self.conn = None
            self._ready.set()  # wake waiters so they see the stop
            self.signal()

    async def _attempt(self) -> Connection:
        """One connection attempt; returns when it failed or, once verified, when it is lost."""
        router = ElicitRouter(upstream=self.name, timeout_s=self.settings.elicitation_timeout_s)
        conn = Connection(tag=uuid.uuid4().hex, router=router)
        stats = self.stats
        stats.connect_attempts += 1
        self.state = "starting" if stats.connect_successes == 0 else "reconnecting"
        stats.attempts_in_flight += 1
        stats.attempts_in_flight_max = max(stats.attempts_in_flight_max, stats.attempts_in_flight)
        in_flight = True
        self.signal()
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
                    self.protocol_version = client.protocol_version
                    self.server_info = client.server_info
                    changed = _dump(tools) != _dump(self.tools)
                    self.tools = tools
                    self.conn = conn
                    self.state = "connected"
                    self._ready.set()
                    self.signal()
                    async with anyio.create_task_group() as conn_tg:
                        conn_tg.start_soon(self._refresh_tools, conn, changed)
                        conn_tg.start_soon(keepalive, conn, self.settings, self.protocol_version)
                        await conn.lost.wait()
                        conn_tg.cancel_scope.cancel()
                    if conn.lost_reason not in (None, "closed", "session-not-found"):
                        stats.record_error(conn.lost_reason)
                    self.state = "reconnecting"
                    self.signal()
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
            if self.conn is conn:
                self.conn = None
                self._ready = anyio.Event()
        self.signal()
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
                self.stats.record_error(error_class)
                if outcome is not Outcome.REJECTED:
                    conn.mark_lost(error_class)
                    return
                continue
            except (TimeoutError, ValidationError) as exc:
                self.stats.record_error(type(exc).__name__)
                continue
            self.tools = tools
            self.signal()
            await self._notify_tools_changed()

    async def _notify_tools_changed(self) -> None:
        if self._on_tools_changed is None or self.tools is None:
            return
        try:
            await self._on_tools_changed(self.tools)
        except Exception:  # boundary: a faulty gateway callback must not kill the supervisor
            logger.exception("upstream %r: tools-changed callback raised", self.name)

    async def wait_connection(self) -> Connection:
        """Wait (unbounded: callers bound it) for a live published connection."""
        while True:
            if not self.running:
                raise UpstreamClosed(f"upstream {self.name!r} is not running", upstream=self.name)
            conn = self.conn
            if conn is not None and not conn.lost.is_set():
                return conn
            await self._ready.wait()
            if self.conn is None or self.conn.lost.is_set():
                await anyio.lowlevel.checkpoint()
