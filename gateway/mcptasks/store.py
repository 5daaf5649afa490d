"""Task records: in memory for answers, in the state store for restarts; bound to their principal.

Every change is written (atomically, 0600, under ``<state_dir>/mcp_tasks``) before it is visible to a
``tasks/get``. A record is found only by its id **and** the principal that created it: any other caller is
told it does not exist. Finished tasks are removed once ``ttl_ms`` has passed since their creation (the
clock is injected).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

import anyio

from gateway.mcptasks.records import MCP_TASKS, TERMINAL, McpTaskRecord
from remoteops import StateStore

__all__ = ["McpTaskNotFound", "McpTaskStore", "new_task_id"]


class McpTaskNotFound(LookupError):
    """No task with this id for this caller (unknown, expired, or another principal's)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} not found")
        self.task_id = task_id


def new_task_id() -> str:
    """128 random bits: unguessable, and a valid state-store record id."""
    return f"mt-{secrets.token_hex(16)}"


class McpTaskStore:
    def __init__(self, store: StateStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._records: dict[str, McpTaskRecord] = {}
        self._changed: dict[str, anyio.Event] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self.counters: dict[str, int] = {"created": 0, "polled": 0, "cancelled": 0, "completed": 0}

    def now(self) -> float:
        return self._clock()

    async def load(self) -> list[McpTaskRecord]:
        await self._store.open()
        self._records = await self._store.load_all(MCP_TASKS)
        return list(self._records.values())

    async def save(self, record: McpTaskRecord) -> McpTaskRecord:
        with anyio.CancelScope(shield=True):  # memory and disk never apart
            await self._store.put(MCP_TASKS, record.id, record)
        self._records[record.id] = record
        self._changed.pop(record.id, anyio.Event()).set()
        return record

    async def settle(self, task_id: str, **update: Any) -> McpTaskRecord | None:
        """Apply ``update`` (and the update time) to the record and save it, only while the task is not
        terminal (None when it already was). Changes of one task are serialized: a progress message written
        meanwhile never undoes a cancel request, and of two finishers (the command's end, a cancel) exactly
        one decides the outcome."""
        async with self._locks.setdefault(task_id, anyio.Lock()):
            current = self._records.get(task_id)
            if current is None or current.terminal:
                return None
            return await self.save(current.model_copy(update={**update, "updated_at": self._clock()}))

    def current(self, task_id: str) -> McpTaskRecord | None:
        return self._records.get(task_id)

    def find(self, task_id: str, principal: str) -> McpTaskRecord:
        record = self._records.get(task_id)
        if record is None or not secrets.compare_digest(record.principal, principal):
            raise McpTaskNotFound(task_id)
        if record.terminal and record.expires_at() <= self._clock():
            raise McpTaskNotFound(task_id)
        return record

    async def changed(self, task_id: str) -> None:
        """Return at the next change of this task's record."""
        await self._changed.setdefault(task_id, anyio.Event()).wait()

    def owned_by(self, principal: str) -> list[McpTaskRecord]:
        now = self._clock()
        mine = [
            r
            for r in self._records.values()
            if r.principal == principal and not (r.terminal and r.expires_at() <= now)
        ]
        return sorted(mine, key=lambda r: r.created_at, reverse=True)

    def active(self, principal: str) -> int:
        return sum(1 for r in self._records.values() if r.principal == principal and not r.terminal)

    async def purge_expired(self) -> list[str]:
        """Remove finished tasks whose ttl has passed; return their ids."""
        now = self._clock()
        gone = [r.id for r in self._records.values() if r.status in TERMINAL and r.expires_at() <= now]
        for task_id in gone:
            await self._store.delete(MCP_TASKS, task_id)
            self._records.pop(task_id, None)
            self._changed.pop(task_id, None)
            self._locks.pop(task_id, None)
        return gone

    def health(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        by_generation: dict[str, int] = {}
        for record in self._records.values():
            by_status[record.status] = by_status.get(record.status, 0) + 1
            by_generation[record.generation] = by_generation.get(record.generation, 0) + 1
        return {
            "total": len(self._records),
            "by_status": dict(sorted(by_status.items())),
            "by_generation": dict(sorted(by_generation.items())),
            "durable": sum(1 for r in self._records.values() if r.durable),
            "since_start": dict(self.counters),
        }
