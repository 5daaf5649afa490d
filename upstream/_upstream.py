"""`Upstream`: one supervised connection to one upstream MCP server.

The facade: lifecycle, health, and the entry points `list_tools`, `call_tool` and `relay` (any
relayed request: resources, prompts and completions go through the same `Relay` from `surface`, the
upstream's own MCP tasks from `tasks`).
The retry policy (what provably never ran is re-sent; what may have run is reported ambiguous,
never replayed) lives in `upstream._relay`; the connection itself is owned by a supervisor task:
see `upstream._supervisor`.

Elicitation is relayed per call (`call_tool(elicit=...)`), but only where the question can be
attributed without guessing: see `upstream._elicit`. Sampling and roots are not relayed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import anyio.abc
import mcp_types as types
from pydantic import BaseModel

from upstream._calls import call_params
from upstream._elicit import ElicitCallback
from upstream._health import UpstreamHealth
from upstream._reconnect import Backoff
from upstream._relay import ProgressCallback, Relay, RelayedRequest
from upstream._settings import UpstreamSettings
from upstream._spawned import SpawnedProcess
from upstream._stderr import StderrCallback
from upstream._supervisor import Supervisor, ToolsChangedCallback
from upstream._surface import SurfaceCallback
from upstream._surface_api import UpstreamSurface
from upstream._tasks import UpstreamTasks
from upstream._transport import SecretCallback

__all__ = ["ProgressCallback", "ToolsChangedCallback", "Upstream"]

R = TypeVar("R", bound=BaseModel)


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
        spawned: SpawnedProcess | None = None,
    ) -> None:
        """`spawned`: this stdio upstream's process, already started by the caller (it must match the
        settings: `SpawnedProcess.matches`); the first connection uses it, later ones spawn their own.
        `on_stderr` receives a stdio upstream's stderr line by line (default: the `upstream.stderr`
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
            spawned=spawned,
        )
        self._relay = Relay(settings, self._sup)
        self._exit_stack: AsyncExitStack | None = None
        self.surface = UpstreamSurface(settings, self._sup, self._relay)
        """Resources, resource templates, prompts and completions (`upstream._surface_api`)."""
        self.tasks = UpstreamTasks(settings, self._sup, self._relay)
        """The upstream's own MCP tasks, in the era it offers them (`upstream._tasks`)."""

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

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, unchanged, all pages. Served from the cache (refreshed on every
        (re)connect and on list_changed); during an outage the last known list is returned."""
        tools = self._sup.tools
        if tools is None:
            await self._relay.acquire(anyio.current_time())
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
        return await self._relay(
            request, result_type, subject=subject, limit_s=limit_s, progress=progress, elicit=elicit
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
