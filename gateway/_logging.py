"""Process logging, configured once by the entrypoint: one JSON line format on stderr, redacted.

structlog records and standard-library records (mcp, uvicorn, asyncssh, httpx, the `upstream`
package) go through one handler and one `structlog.stdlib.ProcessorFormatter`: the same fields
(`timestamp`, `level`, `logger`, `event`), the same redactor, the same JSON renderer. A relayed stdio
upstream's stderr arrives here line by line as `upstream_stderr` records (see `gateway.relay.tools`).

stdout is never touched (in stdio mode it carries the protocol). The gateway's own loggers (`gateway`,
`upstream`, `remoteops`) log at the configured level; other libraries at WARNING unless debug logging
is asked for.
"""

from __future__ import annotations

import logging
import sys
from typing import Final

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from gateway._redact import Redactor

__all__ = ["configure_logging"]

OWN_LOGGERS: Final = ("gateway", "upstream", "remoteops")


def configure_logging(level: str, redactor: Redactor) -> None:
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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(numeric)
