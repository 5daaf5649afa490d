"""Process logging, configured once by the entrypoint: one JSON line format on stderr, redacted.

structlog records and standard-library records (mcp, uvicorn, asyncssh, httpx, the `upstream`
package) go through one handler and one `structlog.stdlib.ProcessorFormatter`: the same fields
(`timestamp`, `level`, `logger`, `event`), the same redactor, the same JSON renderer. A relayed stdio
upstream's stderr arrives here line by line as `upstream_stderr` records (see `gateway.relay.tools`).

stdout is never touched (in stdio mode it carries the protocol). The gateway's own loggers (`gateway`,
`upstream`, `remoteops`) log at the configured level; other libraries at WARNING unless debug logging
is asked for.

The event loop only hands a record over: redaction, rendering and the write to stderr happen in one writer
thread behind a bounded queue (a `logging.handlers.QueueHandler`). So a call's canonical line is usually
rendered and written after its answer went out (the writer needs the GIL, which the loop keeps until it
waits on I/O or a switch interval passes: a long render of a large answer may let the writer in first), and
a stderr nobody reads — a full pipe — can never stall the loop: records that find the queue full are dropped
and counted, and the writer says how many when it can write again. Lines keep their order. The returned
`LogWriter` is stopped when serving ends, which writes everything still queued.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import queue
import sys
import threading
from typing import Final

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from gateway._redact import Redactor

__all__ = ["LogWriter", "configure_logging"]

OWN_LOGGERS: Final = ("gateway", "upstream", "remoteops")
QUEUE_RECORDS: Final = 10_000
"""Records that may wait for stderr; beyond this they are dropped (and counted in a later line)."""


class _Handoff(logging.handlers.QueueHandler):
    """Puts the record itself on the queue (the writer's ProcessorFormatter needs structlog's event dict,
    which the stock ``prepare`` would flatten into a string); never blocks; counts what it drops."""

    def __init__(self, records: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(records)
        self.records = records
        self._lock = threading.Lock()
        self.dropped = 0
        self.writer: LogWriter | None = None

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        with self._lock:
            try:
                self.records.put_nowait(record)
            except queue.Full:
                self.dropped += 1
                return
            if self.dropped:
                note = logging.makeLogRecord(
                    {
                        "name": "gateway.logging",
                        "levelno": logging.WARNING,
                        "levelname": "WARNING",
                        "msg": "log_lines_dropped: %d line(s) found stderr's queue full",
                        "args": (self.dropped,),
                    }
                )
                try:
                    self.records.put_nowait(note)
                except queue.Full:
                    return
                self.dropped = 0


class LogWriter:
    """The writer thread; :meth:`stop` writes what is queued (bounded: a stderr nobody reads cannot hold
    the exit), ends the thread and puts the plain stderr handler back, so a line logged later (the last
    words of a shutdown) is still written."""

    def __init__(self, handoff: _Handoff, direct: logging.Handler, *, stop_timeout_s: float = 5.0) -> None:
        self.handoff = handoff
        self._direct = direct
        self._stop_timeout_s = stop_timeout_s
        handoff.writer = self
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, name="gateway-log-writer", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while (record := self.handoff.records.get()) is not None:
            try:
                self._direct.handle(record)
            except Exception as exc:  # a handler that raises loses its line, never the writer
                with contextlib.suppress(Exception):  # and the record (unredacted) is never printed
                    sys.stderr.write(f'{{"event": "log_line_lost", "error": "{type(exc).__name__}"}}\n')

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with contextlib.suppress(queue.Full):
            self.handoff.records.put(None, timeout=self._stop_timeout_s)  # after every queued record
        thread.join(self._stop_timeout_s)
        root = logging.getLogger()
        root.handlers[:] = [self._direct if h is self.handoff else h for h in root.handlers]


def configure_logging(level: str, redactor: Redactor) -> LogWriter:
    numeric = getattr(logging, level.upper(), logging.INFO)

    def redact(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
        return dict(redactor.any(event))

    stamped: list[Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *stamped,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=stamped,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact,
            structlog.processors.JSONRenderer(),
        ],
    )
    root = logging.getLogger()
    for old in root.handlers:  # configured again in this process (in-process runs): one writer at a time
        if isinstance(old, _Handoff) and old.writer is not None:
            old.writer.stop()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handoff = _Handoff(queue.Queue(QUEUE_RECORDS))
    writer = LogWriter(handoff, handler)
    root.handlers[:] = [handoff]
    root.setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(numeric)
    return writer
