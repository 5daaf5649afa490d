"""The audit shipper's spool: records waiting for the collector, on disk, in order, bounded, across restarts.

Layout (``<state_dir>/audit-spool/``, 0700; files 0600):

* segments ``<first-seq>.jsonl``: audit lines exactly as the audit file holds them (the same redacted
  bytes), of consecutive sequence numbers starting at the number in the name;
* ``stream``: a random id made once, when the spool is created (``atomic_write``, never replaced);
* ``head``: the first sequence number not yet acknowledged by the collector (``atomic_write``). Everything
  below it was delivered (or dropped); segments wholly below it are deleted.

``(stream, seq)`` is a record's idempotency key: numbers are consecutive and never reused in a stream.

Bound: ``max_bytes`` over all segments. A batch that does not fit either drops the **oldest** records
(``drop_oldest``: whole segments, oldest first, then the oldest lines of the batch itself; their sequence
numbers stay used, so the collector sees the gap) or is **refused** (``refuse_new``: the lines that do not
fit are not spooled and get no sequence number); both are counted and logged once per episode.

Durability: appends are not fsynced — the spool survives a process crash or restart (like the audit file),
not a power cut. A torn last line (a crash mid-append) is cut at start-up and counted as ``lost``; so are
records of a segment that went missing. Stray temporary files of an interrupted ``atomic_write`` are removed.

Runs in worker threads only (the audit writer's, the shipper's): every method takes one lock.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from remoteops import atomic_write

__all__ = ["Spool"]

_log = structlog.get_logger("gateway.audit_ship")
_SEGMENT = re.compile(r"^(\d{20})\.jsonl$")
_MODE = 0o600


@dataclass
class _Segment:
    first: int
    count: int
    size: int

    @property
    def end(self) -> int:
        return self.first + self.count


class Spool:
    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int,
        when_full: Literal["drop_oldest", "refuse_new"],
        segment_bytes: int | None = None,
    ) -> None:
        self.directory = directory
        self._max_bytes = max_bytes
        self._when_full = when_full
        self._segment_bytes = segment_bytes or max(16 * 1024, max_bytes // 16)
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._cursor: tuple[int, int, int] | None = None
        """(seq, segment first, byte offset): where the line ``seq`` starts, so reads need not rescan."""
        self.stream = ""
        self.head = 0
        self.next_seq = 0
        self.spooled = 0
        self.dropped_oldest = 0
        self.refused = 0
        self.lost = 0
        self.failed = 0
        """Lines the disk refused (an ``OSError`` while spooling)."""
        self.last_error: str | None = None
        self._full = False

    # ------------------------------------------------------------------------------------------ opening

    def open(self) -> None:
        """Create or recover the spool (reads every segment once to count its lines)."""
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.directory, 0o700)
            for stray in self.directory.iterdir():
                if stray.name.startswith("."):  # an interrupted atomic_write's temporary file
                    stray.unlink(missing_ok=True)
            stream_file = self.directory / "stream"
            if not stream_file.exists():
                atomic_write(stream_file, secrets.token_hex(8).encode(), mode=_MODE, replace=False)
            self.stream = stream_file.read_text(encoding="ascii").strip()
            names = sorted(p.name for p in self.directory.iterdir() if _SEGMENT.match(p.name))
            self._segments = [self._scan(self.directory / name) for name in names]
            head_file = self.directory / "head"
            if head_file.exists():
                self.head = int(head_file.read_text(encoding="ascii"))
            else:  # new, or the file was removed: start at the oldest record kept (the collector dedupes)
                self.head = self._segments[0].first if self._segments else 0
            self.next_seq = max([self.head, *(s.end for s in self._segments)])
            self._delete_delivered()

    def _scan(self, path: Path) -> _Segment:
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with path.open("r+b") as f:
                f.truncate(cut)
            data = data[:cut]
            self.lost += 1  # the torn line of a crash mid-append (only ever the last segment's tail)
        first = int(path.name.removesuffix(".jsonl"))  # the name matched _SEGMENT
        return _Segment(first=first, count=data.count(b"\n"), size=len(data))

    def _path(self, first: int) -> Path:
        return self.directory / f"{first:020d}.jsonl"

    # ------------------------------------------------------------------------------------------ appending

    def append(self, lines: list[str]) -> None:
        """Spool ``lines`` (in order) under the next sequence numbers; never raises (failures are counted)."""
        encoded = [(line + "\n").encode("utf-8", "backslashreplace") for line in lines]
        with self._lock:
            try:
                encoded = self._make_room(encoded)
                if encoded:
                    self._write(encoded)
                self.last_error = None
            except OSError as exc:
                self.failed += len(encoded)
                self.last_error = f"{type(exc).__name__}: {exc.strerror or exc}"

    def _size(self) -> int:
        return sum(s.size for s in self._segments)

    def _make_room(self, encoded: list[bytes]) -> list[bytes]:
        incoming = sum(map(len, encoded))
        if self._size() + incoming <= self._max_bytes:
            self._full = False
            return encoded
        if not self._full:  # once per episode: the counters say how many
            _log.warning("audit_ship_spool_full", when_full=self._when_full, max_bytes=self._max_bytes)
            self._full = True
        if self._when_full == "refuse_new":
            room = self._max_bytes - self._size()
            kept: list[bytes] = []
            for line in encoded:
                if len(line) > room:
                    break
                kept.append(line)
                room -= len(line)
            self.refused += len(encoded) - len(kept)
            return kept
        while self._segments and self._size() + incoming > self._max_bytes:
            self._drop(self._segments[0])
        while encoded and incoming > self._max_bytes:  # the batch alone is too big: its oldest lines go
            incoming -= len(encoded[0])
            self._skip_unspooled()
            encoded = encoded[1:]
        return encoded

    def _skip_unspooled(self) -> None:
        """A new line dropped before it was ever spooled: its number is used up (and counted)."""
        if self.head == self.next_seq:
            self.head += 1
            self._save_head()
        self.next_seq += 1
        self.dropped_oldest += 1

    def _drop(self, segment: _Segment) -> None:
        undelivered = max(0, segment.end - max(self.head, segment.first))
        self.dropped_oldest += undelivered
        self._path(segment.first).unlink(missing_ok=True)
        self._segments.remove(segment)
        if self.head < segment.end:
            self.head = segment.end
            self._save_head()

    def _write(self, encoded: list[bytes]) -> None:
        """Append to the newest segment, starting a new one whenever it reached the segment size (so a
        full spool drops bounded chunks, and delivered chunks are deleted early)."""
        while encoded:
            current = self._segments[-1] if self._segments else None
            if current is None or current.end != self.next_seq or current.size >= self._segment_bytes:
                current = _Segment(first=self.next_seq, count=0, size=0)
                self._segments.append(current)
            room, take = self._segment_bytes - current.size, 0
            while take < len(encoded) and (take == 0 or len(encoded[take]) <= room):
                room -= len(encoded[take])
                take += 1
            chunk, encoded = encoded[:take], encoded[take:]
            self._append_file(current.first, b"".join(chunk))
            current.count += len(chunk)
            current.size += sum(map(len, chunk))
            self.next_seq += len(chunk)
            self.spooled += len(chunk)

    def _append_file(self, first: int, data: bytes) -> None:
        fd = os.open(self._path(first), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, _MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------------------ delivering

    def read(self, max_records: int, max_bytes: int) -> tuple[int, list[bytes]]:
        """From ``head``: (its sequence number, up to ``max_records`` lines and ``max_bytes`` bytes — always
        at least one line when any is pending), within one segment."""
        with self._lock:
            segment = self._segment_at_head()
            if segment is None:
                return self.head, []
            cursor = self._cursor
            offset = cursor[2] if cursor and cursor[:2] == (self.head, segment.first) else None
            with self._path(segment.first).open("rb") as f:
                if offset is None:
                    for _ in range(self.head - segment.first):
                        f.readline()
                    offset = f.tell()
                f.seek(offset)
                lines: list[bytes] = []
                size = 0
                while len(lines) < max_records:
                    line = f.readline()
                    if not line.endswith(b"\n") or (lines and size + len(line) > max_bytes):
                        break
                    lines.append(line)
                    size += len(line)
            self._cursor = (self.head + len(lines), segment.first, offset + size)
            return self.head, lines

    def _segment_at_head(self) -> _Segment | None:
        for segment in self._segments:
            if segment.first <= self.head < segment.end:
                return segment
            if segment.first > self.head:  # a gap (a segment went missing): those records are lost
                self.lost += segment.first - self.head
                self.head = segment.first
                self._save_head()
                return segment if segment.count else None
        return None

    def ack(self, upto: int) -> None:
        """The collector has every record below ``upto``."""
        with self._lock:
            if upto <= self.head:
                return
            self.head = upto
            self._save_head()
            self._delete_delivered()

    def _delete_delivered(self) -> None:
        for segment in list(self._segments):  # appends after the last one start a new segment at next_seq
            if segment.end <= self.head:
                self._path(segment.first).unlink(missing_ok=True)
                self._segments.remove(segment)

    def _save_head(self) -> None:
        atomic_write(self.directory / "head", str(self.head).encode("ascii"), mode=_MODE)

    # ------------------------------------------------------------------------------------------ status

    def pending(self) -> int:
        with self._lock:
            return self.next_seq - self.head

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "stream": self.stream,
                "next_seq": self.next_seq,
                "pending_records": self.next_seq - self.head,
                "spool_bytes": self._size(),
                "spool_max_bytes": self._max_bytes,
                "when_full": self._when_full,
                "spooled": self.spooled,
                "dropped_oldest": self.dropped_oldest,
                "refused": self.refused,
                "lost": self.lost,
                "spool_failed": self.failed,
            }
