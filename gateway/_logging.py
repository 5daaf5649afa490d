"""Process logging, configured once by the entrypoint: structlog JSON lines on stderr, redacted.

stdout is never touched (in stdio mode it carries the protocol). Library loggers (mcp, uvicorn,
asyncssh, httpx) go through the same handler at WARNING unless debug logging is asked for.
"""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.typing import EventDict, WrappedLogger

from gateway._redact import Redactor

__all__ = ["configure_logging"]


def configure_logging(level: str, redactor: Redactor) -> None:
    numeric = getattr(logging, level.upper(), logging.INFO)

    def redact(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
        return dict(redactor.any(event))

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )

    class _Redacting(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return redactor.text(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)
