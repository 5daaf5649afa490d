"""An upstream's resources, resource templates and prompts: the paginated walks, and what changed.

The lists are fetched on demand (never during the connect itself, which stays bounded by the one
`tools/list`) and cached per connection generation: a cached list is served again only while the
connection it came from is the published one and no `list_changed` for it has arrived since. During
an outage the last list known is what there is.

Notifications the upstream sends about them (`notifications/resources/list_changed`,
`notifications/prompts/list_changed`, `notifications/resources/updated`) are coalesced on the
connection and handed to the embedding application by a task of the supervisor, never from the SDK's
receive loop (a slow consumer must not stall the connection's answers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

__all__ = [
    "KINDS",
    "SurfaceCache",
    "SurfaceCallback",
    "SurfaceKind",
    "SurfaceNotice",
    "SurfaceNotices",
    "list_all",
    "supports",
]

SurfaceKind = Literal["resources", "resource_templates", "prompts"]
KINDS: Final[tuple[SurfaceKind, ...]] = ("resources", "resource_templates", "prompts")

_PAGE_CAP: Final = 100

_LIST: Final[dict[SurfaceKind, tuple[str, Any, Any, str]]] = {
    "resources": ("resources/list", types.ListResourcesRequest, types.ListResourcesResult, "resources"),
    "resource_templates": (
        "resources/templates/list",
        types.ListResourceTemplatesRequest,
        types.ListResourceTemplatesResult,
        "resource_templates",
    ),
    "prompts": ("prompts/list", types.ListPromptsRequest, types.ListPromptsResult, "prompts"),
}


def supports(capabilities: types.ServerCapabilities | None, kind: SurfaceKind) -> bool:
    """Whether the upstream declared the capability that serves `kind`."""
    if capabilities is None:
        return False
    if kind == "prompts":
        return capabilities.prompts is not None
    return capabilities.resources is not None


async def list_all(session: ClientSession, kind: SurfaceKind) -> tuple[Any, ...]:
    """Walk every page of one list (bounded); the items are returned as validated, unchanged."""
    method, request_type, result_type, attribute = _LIST[kind]
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(_PAGE_CAP):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.send_request(request_type(params=params), result_type)
        items.extend(getattr(page, attribute))
        cursor = page.next_cursor
        if cursor is None:
            return tuple(items)
        if cursor in seen:
            raise MCPError(types.INTERNAL_ERROR, f"{method} repeated cursor {cursor!r}")
        seen.add(cursor)
    raise MCPError(types.INTERNAL_ERROR, f"{method} did not end within {_PAGE_CAP} pages")


@dataclass(frozen=True)
class SurfaceNotice:
    """What the upstream said changed: lists to fetch again, resource URIs to read again."""

    lists_changed: frozenset[SurfaceKind]
    updated: frozenset[str]


SurfaceCallback = Callable[[SurfaceNotice], Awaitable[None]]
"""Receives the upstream's resource/prompt notifications (coalesced), in a task of its own."""


@dataclass
class SurfaceNotices:
    """Notifications received on one connection and not yet handed on (coalesced)."""

    lists_changed: set[SurfaceKind] = field(default_factory=set)
    updated: set[str] = field(default_factory=set)
    arrived: anyio.Event = field(default_factory=anyio.Event)

    def note(self, message: object) -> bool:
        """Record `message` if it is one of ours; False otherwise."""
        if isinstance(message, types.ResourceListChangedNotification):
            self.lists_changed.update(("resources", "resource_templates"))
        elif isinstance(message, types.PromptListChangedNotification):
            self.lists_changed.add("prompts")
        elif isinstance(message, types.ResourceUpdatedNotification):
            self.updated.add(message.params.uri)
        else:
            return False
        self.arrived.set()
        return True

    async def next(self) -> SurfaceNotice:
        await self.arrived.wait()
        self.arrived = anyio.Event()
        notice = SurfaceNotice(frozenset(self.lists_changed), frozenset(self.updated))
        self.lists_changed.clear()
        self.updated.clear()
        return notice


@dataclass
class SurfaceCache:
    """The last list known of each kind, and the connection (tag) it was fetched on."""

    items: dict[SurfaceKind, tuple[Any, ...]] = field(default_factory=dict)
    fetched_on: dict[SurfaceKind, str] = field(default_factory=dict)

    def fresh(self, kind: SurfaceKind, tag: str) -> tuple[Any, ...] | None:
        if self.fetched_on.get(kind) == tag:
            return self.items[kind]
        return None

    def last_known(self, kind: SurfaceKind) -> tuple[Any, ...] | None:
        return self.items.get(kind)

    def store(self, kind: SurfaceKind, tag: str, items: tuple[Any, ...]) -> None:
        self.items[kind] = items
        self.fetched_on[kind] = tag

    def invalidate(self, kinds: frozenset[SurfaceKind]) -> None:
        for kind in kinds:
            self.fetched_on.pop(kind, None)
