"""`Upstream`: one supervised connection to one upstream MCP server.

The facade: lifecycle, health, and the entry points `list_tools`, `call_tool` and `relay` (any
relayed request: resources, prompts and completions use it through `surface`), whose retry
policy lives here (what provably never ran is re-sent; what may have run is reported ambiguous,
never replayed). The connection itself is owned by a supervisor task: see `upstream._supervisor`.

Elicitation is relayed per call (`call_tool(elicit=...)`), but only where the question can be
attributed without guessing: see `upstream._elicit`. Sampling and roots are not relayed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from functools import partial
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from upstream._calls import Outcome, call_params, classify
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
from upstream._health import UpstreamHealth
from upstream._liveness import LIVENESS_LOST
from upstream._reconnect import Backoff
from upstream._settings import UpstreamSettings
from upstream._stderr import StderrCallback
from upstream._supervisor import Supervisor, ToolsChangedCallback
from upstream._surface import SurfaceCallback
from upstream._surface_api import UpstreamSurface
from upstream._transport import SecretCallback

__all__ = ["ProgressCallback", "RelayedRequest", "ToolsChangedCallback", "Upstream"]

R = TypeVar("R", bound=BaseModel)

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
        on_surface_changed: SurfaceCallback | None = None,
        backoff: Backoff | None = None,
        on_stderr: StderrCallback | None = None,
        on_secret: SecretCallback | None = None,
    ) -> None:
        """`on_stderr` receives a stdio upstream's stderr line by line (default: the `upstream.stderr`
        logger); `on_secret` receives each credential read at runtime (a rotated bearer token) before
        it is used, so the embedding application can redact it. `on_surface_changed` receives the
        upstream's resource/prompt notifications (list_changed, resources/updated), coalesced."""
        self.settings = settings
        self.backoff = backoff or Backoff(
            initial_s=settings.backoff_initial_s,
            max_s=settings.backoff_max_s,
            multiplier=settings.backoff_multiplier,
            jitter=settings.backoff_jitter,
        )
        self._sup = Supervisor(
            settings,
            backoff=self.backoff,
            on_tools_changed=on_tools_changed,
            on_surface_changed=on_surface_changed,
            on_stderr=on_stderr,
            on_secret=on_secret,
        )
        self._exit_stack: AsyncExitStack | None = None
        self.surface = UpstreamSurface(self)
        """Resources, resource templates, prompts and completions (`upstream._surface_api`)."""

    @property
    def name(self) -> str:
        return self.settings.name

    async def first_connection(self) -> None:
        """Return once the first connection since start has a verdict (connected or failed), or at
        once when it has one already or the upstream is not running; never later than
        `settings.first_list_wait_s` after start. For a first tools/list that should hold this
        upstream's tools without waiting for an upstream known to be down."""
        sup = self._sup
        if sup.started_at is None:
            return
        with anyio.move_on_after(sup.started_at + self.settings.first_list_wait_s - anyio.current_time()):
            while sup.first_attempt_in_flight():
                await sup.changed.wait()

    async def wait_for(self, predicate: Callable[[UpstreamHealth], bool]) -> UpstreamHealth:
        """Wait until `predicate(health())` holds (unbounded: wrap it in `anyio.fail_after`)."""
        while True:
            changed = self._sup.changed
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
        await self._sup.run(task_status=task_status)

    # ----------------------------------------------------------------- callers

    async def _acquire(self, started: float) -> Connection:
        remaining = started + self.settings.call_wait_s - anyio.current_time()
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
            f"(call_wait_s = {self.settings.call_wait_s:g}s): {why}",
            upstream=self.name,
            state=self._sup.state,
            waited_s=waited,
            last_error=self._sup.stats.last_error_class,
        )

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, unchanged, all pages. Served from the cache (refreshed on every
        (re)connect and on list_changed); during an outage the last known list is returned."""
        tools = self._sup.tools
        if tools is None:
            await self._acquire(anyio.current_time())
            tools = self._sup.tools or ()
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
        return await self.relay(request, types.CallToolResult, subject=name, progress=progress, elicit=elicit)

    async def relay(
        self,
        request: RelayedRequest,
        result_type: type[R],
        *,
        subject: str,
        limit_s: float | None = None,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> R:
        """Send one request and return the upstream's result unchanged, under the relay's one retry
        policy: what provably never ran (not sent; a definitive "session not found", once) is sent
        again on the next connection; what may have run is reported (`UpstreamAmbiguous`), never
        re-sent. `subject` names the request in errors (a tool name, a resource URI, a prompt name);
        `limit_s` bounds the answer (default `call_timeout_s`; past it: `UpstreamCallTimeout`).

        Raises the exceptions listed for `call_tool`.
        """
        method = request.method
        started = anyio.current_time()
        session_retried = False
        not_sent = 0
        while True:
            conn = await self._acquire(started)
            session = conn.session()
            sent_at = anyio.current_time()
            limit = self.settings.call_timeout_s if limit_s is None else limit_s
            routed = conn.router.enter(elicit, deadline=sent_at + limit)
            answered = False  # stays False if cancelled or abandoned: the upstream may still run it

            send = partial(session.send_request, request, result_type, progress_callback=progress)
            result: R | None = None
            try:
                with anyio.move_on_after(limit):
                    result = await conn.request(send)
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
            limit = self.settings.liveness_timeout_s
            why = f" (no liveness probe answered within liveness_timeout_s = {limit:g}s)"
        return UpstreamAmbiguous(
            f"upstream {self.name!r}: connection lost during {tool} after {elapsed:.1f}s{why}; "
            "the call may or may not have run and was not re-sent",
            upstream=self.name,
            tool=tool,
            elapsed_s=elapsed,
            cause=error_class,
        )

    # ----------------------------------------------------------------- health

    def health(self) -> UpstreamHealth:
        sup = self._sup
        stats = sup.stats
        info = sup.server_info
        conn = sup.conn
        state = sup.state
        if state == "connected" and (conn is None or conn.lost.is_set()):
            state = "reconnecting"  # known lost; the old client may still be tearing down
        return UpstreamHealth(
            name=self.name,
            transport=self.settings.transport,
            state=state,
            protocol_version=sup.protocol_version,
            server_name=info.name if info is not None else None,
            server_version=info.version if info is not None else None,
            tool_count=len(sup.tools) if sup.tools is not None else None,
            connected_since=conn.connected_since if conn is not None else None,
            connect_attempts=stats.connect_attempts,
            connect_successes=stats.connect_successes,
            attempts_in_flight_max=stats.attempts_in_flight_max,
            ambiguous_losses=stats.ambiguous_losses,
            session_not_found_retries=stats.session_not_found_retries,
            last_error_class=stats.last_error_class,
            last_error=stats.last_error,
            last_error_at=stats.last_error_at,
            consecutive_failures=stats.consecutive_failures,
            retry_delay_s=stats.retry_delay_s if state == "down" else None,
            last_probe_ok_at=stats.last_probe_ok_at if conn is not None else None,
        )
