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
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from tenacity import RetryCallState

from upstream._calls import Outcome, classify, list_all_tools
from upstream._connection import DRAIN_S, Abandoned, Connection
from upstream._elicit import ElicitRouter
from upstream._errors import UpstreamClosed
from upstream._failures import connect_timeout, describe, error_class, liveness_timeout
from upstream._health import Stats, UpstreamState, utc_now_iso
from upstream._liveness import LIVENESS_LOST, liveness
from upstream._reconnect import Backoff
from upstream._settings import UpstreamSettings
from upstream._spawned import SpawnedProcess
from upstream._stderr import StderrCallback
from upstream._surface import SurfaceCache, SurfaceCallback
from upstream._transport import SecretCallback, open_client

__all__ = ["Supervisor", "ToolsChangedCallback"]

logger = logging.getLogger("upstream")

ToolsChangedCallback = Callable[[tuple[types.Tool, ...]], Awaitable[None]]
"""Called with the new tool list after notifications/tools/list_changed, and whenever a
(re)connect publishes a list that differs from the previous one (the first connect included)."""

_QUIET_LOSSES = (None, "closed", "session-not-found")


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
        on_surface_changed: SurfaceCallback | None = None,
        on_stderr: StderrCallback | None = None,
        on_secret: SecretCallback | None = None,
        spawned: SpawnedProcess | None = None,
    ) -> None:
        self.settings = settings
        self._spawned = spawned
        """A stdio process started before the supervisor (it matches the settings): the first attempt's."""
        self.backoff = backoff
        self._on_tools_changed = on_tools_changed
        self._on_surface_changed = on_surface_changed
        self._on_stderr = on_stderr
        self._on_secret = on_secret
        self.stats = Stats()
        self.state: UpstreamState = "stopped"
        self.running = False
        self.started_at: float | None = None
        """anyio time at which `run` started (the first connection attempt)."""
        self.conn: Connection | None = None
        self._ready = anyio.Event()
        self.tools: tuple[types.Tool, ...] | None = None
        self.protocol_version: str | None = None
        self.server_info: types.Implementation | None = None
        self.capabilities: types.ServerCapabilities | None = None
        """What the upstream declared on its last successful connect (kept through an outage)."""
        self.surface = SurfaceCache()
        self.subscriptions: set[str] = set()
        """Resource URIs subscribed through this upstream; subscribed again on every new connection."""
        self.changed = anyio.Event()

    @property
    def name(self) -> str:
        return self.settings.name

    def signal(self) -> None:
        """Wake `changed` waiters: something shown by `Upstream.health()` changed."""
        self.changed.set()
        self.changed = anyio.Event()

    def first_attempt_in_flight(self) -> bool:
        """The first connection since start is still being made (no verdict on it yet)."""
        stats = self.stats
        return (
            self.running
            and stats.connect_successes == 0
            and stats.connect_attempts <= 1
            and (stats.attempts_in_flight > 0 or stats.connect_attempts == 0)
        )

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise the connection until cancelled. Never raises anything but cancellation.

        Each outage is one tenacity run (`Backoff.retrying`), ended by the first working connection;
        once that connection is lost, a new run starts — after the initial delay, except after a
        definitive "session not found" (the upstream is alive: re-initialise now).
        """
        if self.running:
            raise RuntimeError(f"upstream {self.name!r} is already running")
        self.running = True
        self.started_at = anyio.current_time()
        self.state = "starting"
        try:
            task_status.started()
            while True:
                retrying = self.backoff.retrying(before_sleep=self._before_sleep)
                conn: Connection = await retrying(self._attempt_working)
                if conn.lost_reason == "session-not-found":
                    continue
                self.state = "down"
                self.stats.retry_delay_s = self.backoff(RetryCallState(retrying, None, (), {}))
                self.signal()
                await anyio.sleep(self.stats.retry_delay_s)
        finally:
            spawned, self._spawned = self._spawned, None
            if spawned is not None:  # stopped before the first attempt took it
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(spawned.discard)
            self.running = False
            self.state = "stopped"
            self.conn = None
            self._ready.set()  # wake waiters so they see the stop
            self.signal()

    def _before_sleep(self, retry_state: RetryCallState) -> None:
        stats = self.stats
        stats.consecutive_failures = retry_state.attempt_number
        stats.retry_delay_s = retry_state.upcoming_sleep
        self.state = "down"
        logger.warning(
            "upstream %r: connection attempt %d failed: %s; next attempt in %.2fs",
            self.name,
            retry_state.attempt_number,
            stats.last_error,
            retry_state.upcoming_sleep,
        )
        self.signal()

    async def _attempt_working(self) -> Connection | bool:
        """One attempt for tenacity: the (now lost) connection if it worked, False if it failed."""
        conn = await self._attempt()
        return conn if conn.client is not None else False

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
        spawned, self._spawned = self._spawned, None  # used by the first attempt only
        self.signal()
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.settings.connect_timeout_s) as scope:
                async with open_client(
                    self.settings,
                    tag=conn.tag,
                    on_lost=conn.mark_lost,
                    message_handler=conn.handle_message,
                    elicitation_callback=router,
                    on_stderr=self._on_stderr,
                    on_secret=self._on_secret,
                    spawned=spawned,
                ) as client:
                    tools = await list_all_tools(client.session)
                    scope.deadline = math.inf
                    stats.attempts_in_flight -= 1
                    in_flight = False
                    # Functional success: this tenacity run ends here (the only reset of the backoff).
                    stats.connect_successes += 1
                    stats.consecutive_failures = 0
                    stats.retry_delay_s = None
                    conn.client = client
                    conn.connected_since = utc_now_iso()
                    self.protocol_version = client.protocol_version
                    self.server_info = client.server_info
                    self.capabilities = client.server_capabilities
                    changed = _dump(tools) != _dump(self.tools)
                    self.tools = tools
                    async with anyio.create_task_group() as requests:
                        conn.requests = requests
                        self._publish(conn)
                        async with anyio.create_task_group() as conn_tg:
                            conn_tg.start_soon(self._refresh_tools, conn, changed)
                            conn_tg.start_soon(self._forward_surface, conn)
                            conn_tg.start_soon(
                                liveness, conn, self.settings, self.protocol_version, self._probe_answered
                            )
                            await conn.lost.wait()
                            self._unpublish(conn)
                            self._record_loss(conn)
                            conn_tg.cancel_scope.cancel()
                        if not conn.aborted:
                            with anyio.move_on_after(DRAIN_S):
                                await conn.drained()
                        requests.cancel_scope.cancel()
                    # Closing the client talks to the upstream (e.g. an HTTP session DELETE); a wedged
                    # upstream must not hold the supervisor: bound the teardown like a connect.
                    scope.deadline = anyio.current_time() + self.settings.connect_timeout_s
            if scope.cancelled_caught and conn.client is None:
                conn.mark_lost("ConnectTimeout")
                stats.record_error("ConnectTimeout", connect_timeout(self.settings))
        except Exception as exc:  # boundary: any upstream failure ends this attempt, never the gateway
            if conn.client is not None and conn.lost.is_set():
                pass  # teardown noise after a loss already recorded
            else:
                conn.mark_lost(error_class(exc))
                stats.record_error(error_class(exc), describe(exc, self.settings))
        finally:
            if spawned is not None and not spawned.taken:  # the attempt failed before talking to it
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(spawned.discard)
            if in_flight:
                stats.attempts_in_flight -= 1
            conn.mark_lost(conn.lost_reason or "closed")
            self._unpublish(conn)
        self.signal()
        return conn

    def _publish(self, conn: Connection) -> None:
        self.conn = conn
        self.state = "connected"
        self._ready.set()
        self.signal()

    def _unpublish(self, conn: Connection) -> None:
        if self.conn is conn:
            self.conn = None
            self._ready = anyio.Event()
            if self.running:
                self.state = "reconnecting"
            self.signal()

    def _record_loss(self, conn: Connection) -> None:
        reason = conn.lost_reason
        if reason in _QUIET_LOSSES or reason is None:
            return
        description = liveness_timeout(self.settings) if reason == LIVENESS_LOST else None
        self.stats.record_error(reason, description)
        logger.warning("upstream %r: connection lost: %s", self.name, description or reason)

    def _probe_answered(self) -> None:
        self.stats.last_probe_ok_at = utc_now_iso()
        self.signal()

    async def _refresh_tools(self, conn: Connection, changed: bool) -> None:
        if changed:
            await self._notify_tools_changed()
        while True:
            await conn.list_changed.wait()
            conn.list_changed = anyio.Event()
            limit = self.settings.list_timeout_s
            tools: tuple[types.Tool, ...] | None = None
            try:
                with anyio.move_on_after(limit):
                    tools = await conn.request(partial(list_all_tools, conn.session()))
            except Abandoned:
                return  # the connection is gone
            except MCPError as exc:
                outcome, error_class = classify(exc, tag=conn.tag, connection_lost=conn.lost.is_set())
                self.stats.record_error(error_class)
                if outcome is not Outcome.REJECTED:
                    conn.mark_lost(error_class)
                    return
                continue
            except ValidationError as exc:
                self.stats.record_error(type(exc).__name__)
                continue
            if tools is None:
                self.stats.record_error("TimeoutError", f"tools/list did not answer within {limit:g}s")
                continue
            self.tools = tools
            self.signal()
            await self._notify_tools_changed()

    async def _forward_surface(self, conn: Connection) -> None:
        """Re-subscribe what was subscribed before (a new session knows nothing), then hand the
        upstream's resource/prompt notifications on, coalesced, until the connection ends."""
        limit = self.settings.list_timeout_s
        for uri in sorted(self.subscriptions):
            request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
            try:
                with anyio.move_on_after(limit):
                    await conn.request(partial(conn.session().send_request, request, types.EmptyResult))
            except Abandoned:
                return
            except (MCPError, ValidationError) as exc:  # best effort: the next subscribe says more
                self.stats.record_error(type(exc).__name__, f"resources/subscribe again failed for {uri}")
        while True:
            notice = await conn.notices.next()
            self.surface.invalidate(notice.lists_changed)
            if self._on_surface_changed is None:
                continue
            try:
                await self._on_surface_changed(notice)
            except Exception:  # boundary: a faulty gateway callback must not kill the supervisor
                logger.exception("upstream %r: surface-changed callback raised", self.name)

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
            if conn is None:
                await self._ready.wait()
            else:
                await self.changed.wait()  # lost, not yet unpublished: the supervisor signals next
