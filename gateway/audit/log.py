"""The audit log: one canonical JSON line per tool call, written off the event loop with size rotation.

Every record passes the one redaction path (:class:`gateway._redact.Redactor`) and is rendered on the
loop (cheap, and the call's own time); the file I/O happens in a worker thread. Between the two sits a
bounded queue, so a slow or stuck disk can neither stall the loop nor grow memory without limit:

* ``tool_call`` never blocks and never raises: a record that finds the queue full is *dropped*;
* a batch the file refuses (``OSError``) is *failed*;
* either is counted, logged once per episode (on the change from healthy to failing) and shown by
  ``gateway_health`` (``healthy``, ``last_error`` and the counters) — no record is lost silently.

The file is opened per batch with ``O_APPEND``; when it does not end in a newline (a torn last line, e.g.
after a crash or a full disk) the batch starts on a fresh line, so a truncated record never swallows the
next one. The live file and every rotated file (``path.1`` … ``path.N``) are kept at mode 0600. A FIFO is
written as a stream (no rotation); one without a reader is a failed write, never a wait.

Lifecycle: ``async with AuditLog(...)`` runs the writer task; leaving it writes what is queued (bounded by
``close_timeout_s``, shielded from cancellation) and counts anything it could not write as failed.

Relayed resource reads and prompt gets leave one record each too (``relayed_request``), on the same path.

With ``[audit.ship]`` the writer also hands every batch it wrote (the same lines) to the
:class:`~gateway.audit.ship.AuditShipper` in the same worker thread, which spools them on disk and POSTs
them to the collector; it is entered before the writer starts and closed after the writer finished.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from structlog.typing import EventDict, WrappedLogger

from gateway._redact import Redactor
from gateway.audit.chain import Chain, HeadFile, load_key

if TYPE_CHECKING:
    from gateway.audit.ship import AuditShipper

__all__ = ["AuditLog"]

_log = structlog.get_logger("gateway.audit")

QUEUE_RECORDS = 10_000
"""Records that may wait for the disk; beyond this they are dropped (counted, logged, in health)."""
_BATCH_RECORDS = 512
_CLOSE_TIMEOUT_S = 5.0
_MODE = 0o600


@dataclass(frozen=True)
class _Outcome:
    written: int
    error: str | None


class _AuditFile:
    """Appends lines and rotates by size (path, path.1 … path.N), sealing each line into the chain when
    there is one (a rotation starts the new file with a header linking it). Runs in a worker thread only."""

    def __init__(self, path: Path, max_bytes: int, backups: int, chain: Chain | None = None) -> None:
        self._path = path
        self._max_bytes = max_bytes
        self._backups = backups
        self.chain = chain

    def _open(self) -> int:
        try:
            regular = stat.S_ISREG(os.stat(self._path).st_mode)
        except FileNotFoundError:
            regular = True
        if not regular:
            # A FIFO or device (e.g. a log shipper's pipe): never wait for a reader to appear (ENXIO instead),
            # then write blocking; a reader that goes away makes the write fail (EPIPE), never hang.
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(fd, True)
            return fd
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC  # read-write: the last byte is read back
        try:
            fd = os.open(self._path, flags, _MODE)
        except FileNotFoundError:  # the state directory went away: recreate it (private), once
            self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self._path, flags, _MODE)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                if stat.S_IMODE(st.st_mode) != _MODE:  # a pre-existing file keeps no wider mode
                    os.fchmod(fd, _MODE)
                if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                    _write_all(fd, b"\n")  # a torn last line must not swallow the next record
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _rotate(self) -> None:
        if self._backups == 0:
            self._path.unlink(missing_ok=True)
            return
        for index in range(self._backups - 1, 0, -1):
            older = self._path.with_name(f"{self._path.name}.{index}")
            if older.exists():
                older.replace(self._path.with_name(f"{self._path.name}.{index + 1}"))
        first = self._path.with_name(f"{self._path.name}.1")
        self._path.replace(first)
        first.chmod(_MODE)

    def append(self, lines: list[str]) -> tuple[_Outcome, list[str]]:
        """Write ``lines``; the outcome, and the lines as sealed (rotation headers included). Every line
        of the batch is sealed, also those the file refused: they are shipped all the same, and their
        gap in the file is what a verifier reports."""
        chain = self.chain
        sealed: list[str] = []
        done = written = 0
        fd = -1
        error: str | None = None
        try:
            if chain is not None:
                chain.resume(self._path)
            fd = self._open()
            for line in lines:
                data = (line + "\n").encode("utf-8", "backslashreplace")
                size_after = len(data) + (chain.seal_overhead() if chain is not None else 0)
                st = os.fstat(fd)
                size = st.st_size if stat.S_ISREG(st.st_mode) else 0  # only regular files rotate
                if size and size + size_after > self._max_bytes:
                    os.close(fd)
                    fd = -1
                    self._rotate()
                    fd = self._open()
                    if chain is not None:  # the new file starts with the link to the previous one
                        previous = f"{self._path.name}.1" if self._backups else ""
                        header = chain.rotation_header(previous, _now())
                        sealed.append(header)
                        _write_all(fd, (header + "\n").encode("ascii"))
                if chain is not None:
                    line = chain.seal(line)
                    data = (line + "\n").encode("utf-8", "backslashreplace")
                sealed.append(line)
                done += 1
                _write_all(fd, data)
                written += 1
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc.strerror or exc}"
        except Exception as exc:  # the audit file must never take the server down: counted and shown instead
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if fd >= 0:
                os.close(fd)
        if chain is None:
            return _Outcome(written, error), list(lines)
        sealed += [chain.seal(line) for line in lines[done:]]
        chain.save_head()
        return _Outcome(written, error), sealed


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Sink:
    """The structlog "logger" at the end of the processor chain: hands each rendered line to the queue."""

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit

    def msg(self, message: str) -> None:
        self._audit._enqueue(message)

    info = msg


class AuditLog:
    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int,
        backups: int,
        redactor: Redactor,
        queue_records: int = QUEUE_RECORDS,
        close_timeout_s: float = _CLOSE_TIMEOUT_S,
        shipper: AuditShipper | None = None,
        key_file: Path | None = None,
        head_file: Path | None = None,
        create_key: bool = True,
    ) -> None:
        """``key_file``: the chain's MAC key (made there when absent and ``create_key``); None = records
        are not chained. ``head_file``: where the chain's head is kept (default next to the key)."""
        self.path = path
        self.shipper = shipper
        self._key_file = key_file
        self._head_file = head_file or (key_file.with_name("audit.head") if key_file else None)
        self._create_key = create_key
        self._file = _AuditFile(path, max_bytes, backups)
        self._redactor = redactor
        self._capacity = queue_records
        self._close_timeout_s = close_timeout_s
        self._send: MemoryObjectSendStream[str] | None = None
        self._tg: TaskGroup | None = None
        # Made when entered (anyio primitives need the running event loop).
        self._writer_scope: anyio.CancelScope | None = None
        self._writer_done: anyio.Event | None = None
        self._progress: anyio.Event | None = None
        self.enqueued = 0
        self.written = 0
        self.failed = 0
        self.dropped = 0
        self.last_error: str | None = None
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

        def _redact(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
            return dict(redactor.any(event))

        self._log = structlog.wrap_logger(
            _Sink(self),
            processors=[_redact, structlog.processors.JSONRenderer(sort_keys=False)],
            cache_logger_on_first_use=False,
        )

    # ------------------------------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        key_file, head_file = self._key_file, self._head_file
        if key_file is not None and head_file is not None and self._file.chain is None:
            key = await anyio.to_thread.run_sync(lambda: load_key(key_file, create=self._create_key))
            self._redactor.add_secret(key.hex())  # never in a log line, a record or an error
            self._file.chain = Chain(key, HeadFile(head_file, key))
        if self.shipper is not None:
            await self.shipper.__aenter__()
        send, receive = anyio.create_memory_object_stream[str](self._capacity)
        self._writer_scope = anyio.CancelScope(shield=True)
        self._writer_done = anyio.Event()
        self._progress = anyio.Event()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(self._drain, receive, self._writer_scope, self._writer_done)
        self._send, self._tg = send, tg
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        send, tg, scope, done = self._send, self._tg, self._writer_scope, self._writer_done
        self._send = self._tg = None
        if send is None or tg is None or scope is None or done is None:
            return
        send.close()  # the writer ends after writing what is queued
        with anyio.move_on_after(self._close_timeout_s, shield=True):
            await done.wait()
        if not done.is_set():
            scope.cancel()  # a stuck disk: give up on what is left, and say so
        await tg.__aexit__(None, None, None)  # the writer is finished or cancelled: this returns at once
        unsettled = self.enqueued - self._settled()
        if unsettled:
            self.failed += unsettled
            self._failing(f"closed with {unsettled} record(s) not written within {self._close_timeout_s} s")
            self._notify_progress()
        if self.shipper is not None:
            await self.shipper.__aexit__(exc_type, exc, tb)

    async def flush(self) -> None:
        """Wait until every record handed over so far is written or counted as failed or dropped.
        Unbounded by itself: callers put it under their own ``anyio.fail_after``."""
        target = self.enqueued
        while self._settled() < target and self._progress is not None:
            await self._progress.wait()

    # ------------------------------------------------------------------------------------------ writing

    def _settled(self) -> int:
        return self.written + self.failed + self.dropped

    def _notify_progress(self) -> None:
        if self._progress is not None:
            done, self._progress = self._progress, anyio.Event()
            done.set()

    def _failing(self, error: str) -> None:
        if self.last_error is None:
            _log.error(
                "audit_write_failed",
                path=str(self.path),
                error=error,
                failed=self.failed,
                dropped=self.dropped,
            )
        self.last_error = error

    def _recovered(self) -> None:
        if self.last_error is not None:
            _log.warning(
                "audit_write_recovered",
                path=str(self.path),
                failed=self.failed,
                dropped=self.dropped,
            )
        self.last_error = None

    def _enqueue(self, line: str) -> None:
        """Never blocks, never raises: a record that cannot be queued is counted and reported."""
        self.enqueued += 1
        if self._send is None:
            self.dropped += 1
            self._failing("audit writer is not running")
            self._notify_progress()
            return
        try:
            self._send.send_nowait(line)
        except anyio.WouldBlock:
            self.dropped += 1
            self._failing(f"audit queue full ({self._capacity} records waiting for the disk)")
            self._notify_progress()

    async def _drain(
        self, receive: MemoryObjectReceiveStream[str], scope: anyio.CancelScope, done: anyio.Event
    ) -> None:
        # Shielded: cancelling the surrounding scope must not lose queued records; __aexit__ bounds it.
        with scope, receive:
            async for first in receive:
                batch = [first]
                while len(batch) < _BATCH_RECORDS:
                    try:
                        batch.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                outcome = await anyio.to_thread.run_sync(self._write, batch, abandon_on_cancel=True)
                if self.shipper is not None:
                    self.shipper.wake()
                self.written += outcome.written
                if outcome.error is None:
                    self._recovered()
                else:
                    self.failed += len(batch) - outcome.written
                    self._failing(outcome.error)
                self._notify_progress()
        done.set()

    def _write(self, batch: list[str]) -> _Outcome:
        """Worker thread: the batch to the file, then (whatever the file said) to the shipper's spool."""
        outcome, sealed = self._file.append(batch)
        if self.shipper is not None:
            self.shipper.spool(sealed)
        return outcome

    # ------------------------------------------------------------------------------------------ records

    def add_listener(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """``listener(summary)`` after every tool call's record: tool, principal, target, outcome, error
        code, duration (redacted; no arguments). The operator console's live list; must not block."""
        self._listeners.append(listener)

    def _tell(self, summary: dict[str, Any]) -> None:
        if self._listeners:
            clean = dict(self._redactor.any(summary))
            for listener in self._listeners:
                listener(clean)

    def tool_call(
        self,
        *,
        request_id: str,
        principal: str,
        tool: str,
        toolset: str,
        target: str | None,
        outcome: str,
        error_code: str | None,
        duration_ms: float,
        arguments: Any,
        incident: str | None = None,
        identity: dict[str, Any] | None = None,
        facts: Any = None,
    ) -> None:
        """``identity``: the typed principal (kind, subject, client id, scopes) next to its label."""
        self._log.info(
            "tool_call",
            time=datetime.now(UTC).isoformat(timespec="milliseconds"),
            request_id=request_id,
            principal=principal,
            tool=tool,
            toolset=toolset,
            target=target,
            outcome=outcome,
            error_code=error_code,
            duration_ms=round(duration_ms, 3),
            arguments=self._redactor.audit_arguments(arguments),
            **({"incident": incident} if incident else {}),
            **({"identity": identity} if identity else {}),
            **({"facts": facts} if facts else {}),
        )
        approval = (facts or {}).get("approval") if isinstance(facts, dict) else None
        self._tell(
            {
                "time": datetime.now(UTC).isoformat(timespec="seconds"),
                "request_id": request_id,
                "principal": principal,
                "tool": tool,
                "target": target,
                "outcome": outcome,
                "error_code": error_code,
                "duration_ms": round(duration_ms, 1),
                "approver": ((approval or {}).get("approver") or {}).get("label"),
            }
        )

    def approval_decision(self, record: dict[str, Any]) -> None:
        """One record per human decision on an approval: ``approval_id``, ``decision`` (approved, denied),
        ``caller`` and ``approver`` (each kind, subject, label), ``reason``, ``tool``, ``target``, ``rule``,
        ``digest``. The call's own ``tool_call`` record follows when it runs (or fails)."""
        self._log.info(
            "approval_decision", time=datetime.now(UTC).isoformat(timespec="milliseconds"), **record
        )

    def relayed_request(
        self,
        event: str,
        *,
        request_id: str,
        principal: str,
        upstream: str | None,
        subject: dict[str, str],
        outcome: str,
        error_code: str | None,
        duration_ms: float,
        arguments: dict[str, Any] | None,
        incident: str | None = None,
    ) -> None:
        """One record per relayed request that is not a tool call (``resource_read``, ``prompt_get``):
        ``subject`` names it (``{"uri": ...}``, ``{"prompt": ...}``); argument values arrive digested."""
        self._log.info(
            event,
            time=datetime.now(UTC).isoformat(timespec="milliseconds"),
            request_id=request_id,
            principal=principal,
            toolset="upstream",
            upstream=upstream,
            **subject,
            outcome=outcome,
            error_code=error_code,
            duration_ms=round(duration_ms, 3),
            arguments=arguments,
            **({"incident": incident} if incident else {}),
        )

    def mcp_task(self, event: str, **fields: Any) -> None:
        """One record per step of an MCP task (``mcp_task_created``, ``_polled``, ``_cancelled``,
        ``_completed``: task id, principal, tool, target, status, generation, facts); the call that
        created it has its own ``tool_call`` record too. Empty fields are left out."""
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        self._log.info(event, time=stamp, **{k: v for k, v in fields.items() if v is not None})

    def status(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "records_written": self.written,
            "records_failed": self.failed,
            "records_dropped": self.dropped,
            "records_pending": self.enqueued - self._settled(),
            "healthy": self.last_error is None,
            "last_error": self.last_error,
            "ship": self.shipper.status() if self.shipper is not None else None,
        }
