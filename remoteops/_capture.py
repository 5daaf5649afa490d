"""Bounded capture of a byte stream keeping its head and its tail."""

from __future__ import annotations

__all__ = ["HeadTail", "clip"]


class HeadTail:
    """Keeps the first ``head_cap`` bytes and the last ``tail_cap`` bytes; counts everything seen."""

    def __init__(self, head_cap: int, tail_cap: int) -> None:
        self.head_cap = head_cap
        self.tail_cap = tail_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self.tail_cap:  # trim in batches, not on every chunk
                del self._tail[: len(self._tail) - self.tail_cap]

    @property
    def head(self) -> bytes:
        return bytes(self._head)

    @property
    def tail(self) -> bytes:
        return bytes(self._tail[-self.tail_cap :]) if self.tail_cap else b""

    @property
    def gap(self) -> int:
        """Bytes seen but kept in neither part."""
        return self.total - len(self._head) - len(self.tail)


def clip(head: bytes, tail: bytes, gap: int, cap: int) -> tuple[bytes, int]:
    """Join head and tail, keeping at most ``cap`` bytes (half head, rest tail); return (data, dropped)."""
    if gap == 0 and len(head) + len(tail) <= cap:
        return head + tail, 0
    keep_head = cap // 2
    first = head[:keep_head]
    rest = head[keep_head:] + tail if gap == 0 else tail
    keep_tail = cap - len(first)
    last = rest[-keep_tail:] if keep_tail > 0 else b""
    dropped = len(head) + len(tail) + gap - len(first) - len(last)
    return first + last, dropped
