"""One connection generation to an upstream, shared by the supervisor and the callers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession, IncomingMessage

from upstream._elicit import ElicitRouter

__all__ = ["DRAIN_S", "Connection"]

DRAIN_S: Final = 2.0
"""After a loss, how long the supervisor lets in-flight calls settle before closing the client:
on a dead HTTP upstream each pending POST then fails its own connect and is provably not sent,
instead of being cut off by the teardown (which would make it ambiguous)."""


@dataclass(eq=False)
class Connection:
    """One connection generation. `lost` is set once, by whoever first learns it is gone."""

    tag: str
    router: ElicitRouter
    lost: anyio.Event = field(default_factory=anyio.Event)
    lost_reason: str | None = None
    list_changed: anyio.Event = field(default_factory=anyio.Event)
    client: Client | None = None
    connected_since: str | None = None
    in_flight: int = 0
    idle: anyio.Event = field(default_factory=anyio.Event)

    def call_started(self) -> None:
        self.in_flight += 1
        if self.idle.is_set():
            self.idle = anyio.Event()

    def call_ended(self) -> None:
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

    def mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    async def handle_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed.set()
        await anyio.lowlevel.checkpoint()
