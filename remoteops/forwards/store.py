"""Forward records in the gateway's atomic state store (``remoteops._state``): kind ``forward``, version 1.

A record that does not load is moved aside by the store and listed in its problems (never dropped
silently, never adopted)."""

from __future__ import annotations

from remoteops._state import Collection, StateStore
from remoteops.forwards.models import ForwardRecord

__all__ = ["FORWARDS", "StateForwardStore"]

FORWARDS: Collection[ForwardRecord] = Collection(kind="forward", model=ForwardRecord, version=1)


class StateForwardStore:
    """:class:`remoteops.forwards.manager.ForwardStore` over a :class:`StateStore` (opened by its owner)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    async def open(self) -> None:
        await self._store.open()

    async def load_all(self) -> dict[str, ForwardRecord]:
        return await self._store.load_all(FORWARDS)

    async def put(self, record: ForwardRecord) -> None:
        await self._store.put(FORWARDS, record.id, record)

    async def delete(self, forward_id: str) -> bool:
        return await self._store.delete(FORWARDS, forward_id)
