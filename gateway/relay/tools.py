"""The gateway side of relaying: merge upstream tools into the catalog, gate them, route calls.

Resources, resource templates and prompts are relayed by ``relay.surface`` (``gateway.relay.surface_relay``)
under the same rules.

Tool definitions and results pass through unchanged. The only change ever made to a relayed tool is
its *name*, and only when the operator asked for it (a ``prefix``) or when it collides with an own tool
and the collision rule says ``prefix_upstream``; with ``prefer_own`` the relayed tool is dropped. Every
dropped or renamed tool is listed in ``gateway_health`` — never silently.

What the relay gives each upstream from the gateway side: a stderr line callback (each line of a stdio
upstream's stderr becomes one redacted ``upstream_stderr`` log record naming the upstream; blank lines are
dropped and continuation lines join the line they continue, ``upstream._stderr``), and a
secret callback (a bearer token read again on reconnect is registered with the redactor before use).
The first ``tools/list`` waits, bounded, for upstreams still making their first connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import anyio
import mcp_types as types
import structlog

from gateway._early import EarlyUpstreams
from gateway._redact import Redactor
from gateway.config import UpstreamEntry
from gateway.relay.surface_relay import SurfaceRelay
from upstream import (
    ElicitCallback,
    ProgressCallback,
    SpawnedProcess,
    StderrLine,
    SurfaceNotice,
    TasksEra,
    Upstream,
    UpstreamError,
    UpstreamTasks,
)

__all__ = ["Relay", "RelayedTool"]

_log = structlog.get_logger("gateway.relay")


def _log_stderr(line: StderrLine) -> None:
    """One line of an upstream's stderr as a structured record (the log pipeline redacts it)."""
    fields: dict[str, Any] = {"upstream": line.upstream, "line": line.text}
    if line.truncated:
        fields["truncated"] = True
    if line.dropped_before:
        fields["dropped_before"] = line.dropped_before
    if line.lines > 1:
        fields["lines"] = line.lines
    _log.info("upstream_stderr", **fields)


def _handed(early: EarlyUpstreams | None, entry: UpstreamEntry) -> SpawnedProcess | None:
    """The early process of this entry when the loaded settings would have spawned exactly it."""
    found = early.processes.get(entry.connection.name) if early is not None else None
    if found is None or found.claimed:
        return None
    fields = ("process", "stderr_fd", "argv", "env", "cwd", "spawned_at")
    spawned = SpawnedProcess(**{name: getattr(found, name) for name in fields})
    if not spawned.matches(entry.connection):
        return None
    found.claimed = True  # the upstream owns it now
    return spawned


@dataclass(frozen=True)
class RelayedTool:
    exposed_name: str
    original_name: str
    upstream_index: int


@dataclass
class _View:
    """What one upstream currently contributes to the catalog."""

    tools: list[types.Tool] = field(default_factory=list)
    routes: dict[str, RelayedTool] = field(default_factory=dict)
    dropped: list[dict[str, str]] = field(default_factory=list)
    renamed: list[dict[str, str]] = field(default_factory=list)


class Relay:
    def __init__(
        self,
        entries: Sequence[UpstreamEntry],
        *,
        own_names: frozenset[str],
        enabled: bool,
        redactor: Redactor | None = None,
        early: EarlyUpstreams | None = None,
    ) -> None:
        """``early``: stdio upstreams started before the imports; each one whose entry would have spawned
        exactly that process is handed to its upstream, the rest are ended here."""
        self._entries = tuple(entries)
        self._own = own_names
        self._enabled = enabled
        on_secret = redactor.add_secret if redactor is not None else None
        self._upstreams = [
            Upstream(
                entry.connection,
                on_tools_changed=self._make_changed_handler(index),
                on_surface_changed=self._make_notice_handler(index),
                on_stderr=_log_stderr,
                on_secret=on_secret,
                spawned=_handed(early, entry) if enabled else None,
            )
            for index, entry in enumerate(self._entries)
        ]
        if early is not None:
            early.close()  # what no entry took: ended now, not at exit
        self._views = [_View() for _ in self._entries]
        self.surface = SurfaceRelay(
            self._entries, self._upstreams, enabled=enabled, first_connections=self.first_connections
        )
        """Relayed resources, resource templates, prompts and completions (``gateway.relay.surface``)."""
        self._listeners: list[Callable[[], Awaitable[None]]] = []
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            if self._enabled:
                for up in self._upstreams:
                    await stack.enter_async_context(up)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def _make_changed_handler(self, index: int) -> Callable[[tuple[types.Tool, ...]], Awaitable[None]]:
        async def changed(tools: tuple[types.Tool, ...]) -> None:
            if self._enabled:
                self._apply(index, tools)
            for listener in list(self._listeners):
                await listener()

        return changed

    def _make_notice_handler(self, index: int) -> Callable[[SurfaceNotice], Awaitable[None]]:
        async def notice(notice: SurfaceNotice) -> None:
            await self.surface.on_notice(index, notice)

        return notice

    def add_listener(self, listener: Callable[[], Awaitable[None]]) -> None:
        """Called after any upstream's tool list changed (the server forwards list_changed)."""
        self._listeners.append(listener)

    def _build_view(self, index: int, tools: Sequence[types.Tool], taken: set[str]) -> _View:
        entry = self._entries[index]
        view = _View()
        include, exclude = set(entry.include), set(entry.exclude)
        for tool in tools:
            original = tool.name
            if include and original not in include:
                view.dropped.append({"name": original, "reason": "not in include list"})
                continue
            if original in exclude:
                view.dropped.append({"name": original, "reason": "excluded"})
                continue
            exposed = entry.prefix + original
            if exposed in self._own or exposed in taken:
                if entry.on_collision == "prefer_own":
                    view.dropped.append({"name": original, "reason": f"collides with {exposed!r}"})
                    continue
                exposed = f"upstream_{exposed}"
                if exposed in self._own or exposed in taken:
                    view.dropped.append(
                        {"name": original, "reason": f"collides with {exposed!r} after renaming"}
                    )
                    continue
            if exposed != original:
                view.renamed.append({"name": original, "exposed_as": exposed})
                tool = tool.model_copy(update={"name": exposed})
            taken.add(exposed)
            view.tools.append(tool)
            view.routes[exposed] = RelayedTool(exposed, original, index)
        return view

    async def _refresh(self, index: int) -> None:
        self._apply(index, await self._upstreams[index].list_tools())

    def _apply(self, index: int, tools: Sequence[types.Tool]) -> None:
        taken: set[str] = set()
        for other, view in enumerate(self._views):
            if other != index:
                taken.update(view.routes)
        self._views[index] = self._build_view(index, tools, taken)

    async def first_connections(self) -> None:
        """Wait for the upstreams still making their first connection since start, each at most its
        ``first_list_wait_s`` after start; an upstream known to be down (or connected) adds nothing."""
        pending = [up for up in self._upstreams if up.health().tool_count is None]
        if not pending:
            return
        async with anyio.create_task_group() as tg:
            for up in pending:
                tg.start_soon(up.first_connection)

    async def list_tools(self) -> list[types.Tool]:
        """Relayed tools for tools/list. The first list waits (bounded by ``first_list_wait_s``) for
        upstreams that are still making their first connection, so it already holds their tools;
        it never waits for an upstream known to be down: the gateway's own tools stay listable
        through any upstream outage."""
        if not self._enabled:
            return []
        await self.first_connections()
        out: list[types.Tool] = []
        for index, up in enumerate(self._upstreams):
            if up.health().tool_count is not None:  # a list is known (possibly from before an outage)
                await self._refresh(index)
            out.extend(self._views[index].tools)
        return out

    async def resolve(self, name: str) -> RelayedTool | None:
        if not self._enabled:
            return None
        for view in self._views:
            if name in view.routes:
                return view.routes[name]
        # Called without listing first (e.g. right after a gateway restart): learn the lists, each
        # bounded by that upstream's call_wait_s; an unreachable upstream simply contributes nothing.
        for index in range(len(self._upstreams)):
            try:
                await self._refresh(index)
            except UpstreamError:
                continue
            if name in self._views[index].routes:
                return self._views[index].routes[name]
        return None

    def never_listed(self) -> list[str]:
        """Enabled upstreams whose tool list has never been learnt (unreachable since start)."""
        if not self._enabled:
            return []
        return [up.name for up in self._upstreams if up.health().tool_count is None]

    async def call(
        self,
        tool: RelayedTool,
        params: types.CallToolRequestParams,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> types.CallToolResult:
        """Relay one call; arguments and result untouched. The caller's progress token is not
        forwarded (the upstream leg has its own); progress is relayed through ``progress``, and the
        upstream's elicitation through ``elicit`` where it can be attributed to this call."""
        up = self._upstreams[tool.upstream_index]
        meta = {k: v for k, v in (params.meta or {}).items() if k != "progress_token"} or None
        return await up.call_tool(
            tool.original_name, params.arguments, meta=meta, progress=progress, elicit=elicit
        )

    def tasks_of(self, tool: RelayedTool) -> UpstreamTasks:
        """The own MCP tasks of this tool's upstream (``UpstreamTasks.era``: which, if any, it offers)."""
        return self._upstreams[tool.upstream_index].tasks

    def upstream_tasks(self, index: int) -> UpstreamTasks:
        return self._upstreams[index].tasks

    def upstream_name(self, index: int) -> str:
        return self._upstreams[index].name

    async def call_task(
        self,
        tool: RelayedTool,
        params: types.CallToolRequestParams,
        era: TasksEra,
        *,
        ttl_ms: int | None = None,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> dict[str, Any]:
        """Relay one call asking the upstream for a task in ``era`` (its answer returned as sent: a
        ``CreateTaskResult``, or the ordinary result of an upstream that answered inline)."""
        tasks = self.tasks_of(tool)
        meta = {k: v for k, v in (params.meta or {}).items() if k != "progress_token"} or None
        return await tasks.call_tool(
            tool.original_name,
            params.arguments,
            era,
            meta=meta,
            ttl_ms=ttl_ms,
            progress=progress,
            elicit=elicit,
        )

    def tool_count(self) -> int:
        return sum(len(view.tools) for view in self._views)

    def health(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index, up in enumerate(self._upstreams):
            view = self._views[index]
            out.append(
                {
                    **up.health().model_dump(mode="json"),
                    "enabled": self._enabled,
                    "relayed_tools": len(view.tools),
                    "dropped": view.dropped,
                    "renamed": view.renamed,
                    **self.surface.health(index),
                }
            )
        return out

    def describe(self) -> list[str]:
        if not self._entries:
            return ["No upstream terminal server is configured."]
        lines = []
        for index, up in enumerate(self._upstreams):
            h = up.health()
            if not self._enabled:
                lines.append(
                    f"Upstream {h.name!r} ({h.transport}) is configured but not relayed: "
                    "the 'upstream' toolset is off."
                )
                continue
            server = f"{h.server_name} {h.server_version or ''}".strip() if h.server_name else "not yet known"
            # What the client is served (after include/exclude/collisions), not the upstream's own count.
            count = len(self._views[index].tools) if h.tool_count is not None else "unknown number of"
            lines.append(
                f"Upstream {h.name!r} ({h.transport}): state {h.state}, server {server}, "
                f"{count} tools relayed unchanged."
            )
        return lines
