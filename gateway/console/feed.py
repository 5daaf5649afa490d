"""The console's live feed: the last N calls from the audit stream, and a tick when approvals change.

:class:`Feed` listens to the audit log (one summary per tool call, already redacted) and to the approval
hub; :meth:`Feed.events` yields server-sent events for one browser: ``call`` (a JSON summary) for each new
call, ``approvals`` when the pending list changed, and a comment every ``keepalive_s`` so proxies keep the
stream open; every stream ends when serving stops. Nothing blocks the call path: a listener only appends
and wakes the waiting streams.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio

from gateway.approvals.hub import Approval

__all__ = ["Feed"]


class Feed:
    def __init__(self, size: int) -> None:
        self._calls: deque[tuple[int, dict[str, Any]]] = deque(maxlen=size)
        self._seq = 0
        self._approvals = 0
        self._wake: anyio.Event | None = None
        self._stopped = False

    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Serving stops: every stream ends."""
        self._stopped = True
        self._notify()

    def _notify(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    def on_call(self, summary: dict[str, Any]) -> None:
        self._seq += 1
        self._calls.append((self._seq, summary))
        self._notify()

    def on_approval(self, _: Approval) -> None:
        self._approvals += 1
        self._notify()

    def recent(self) -> list[dict[str, Any]]:
        """Newest first."""
        return [summary for _, summary in reversed(self._calls)]

    async def events(self, *, keepalive_s: float = 15.0, lifetime_s: float = 3600.0) -> AsyncIterator[str]:
        """The SSE text of one stream, from now on, for at most ``lifetime_s`` (the browser reconnects)."""
        seen, approvals = self._seq, self._approvals
        yield "retry: 2000\n\n"
        with anyio.move_on_after(lifetime_s):
            while not self.stopped():
                if self._wake is None:
                    self._wake = anyio.Event()
                wake = self._wake
                if self._seq == seen and self._approvals == approvals:
                    with anyio.move_on_after(keepalive_s) as idle:
                        await wake.wait()
                    if self.stopped():
                        break
                    if idle.cancelled_caught:
                        yield ": keepalive\n\n"
                        continue
                for seq, summary in list(self._calls):
                    if seq > seen:
                        yield f"event: call\nid: {seq}\ndata: {json.dumps(summary, default=str)}\n\n"
                seen = self._seq
                if self._approvals != approvals:
                    approvals = self._approvals
                    yield "event: approvals\ndata: {}\n\n"
