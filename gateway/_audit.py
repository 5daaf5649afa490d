"""The audit log: one canonical JSON line per tool call, written through structlog with size rotation.

Relayed resource reads and prompt gets leave one record each too (``relayed_request``).

Every record passes the one redaction path (:class:`gateway._redact.Redactor`) before it is rendered.
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

from gateway._redact import Redactor

__all__ = ["AuditLog"]

_log = structlog.get_logger("gateway.audit")


class _RotatingWriter:
    """A minimal structlog "logger": appends lines, rotates by size (path, path.1 … path.N), mode 0600."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self._path = path
        self._max_bytes = max_bytes
        self._backups = backups
        self._lock = threading.Lock()
        self.records = 0
        self.last_error: str | None = None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _rotate(self) -> None:
        if self._backups == 0:
            self._path.unlink(missing_ok=True)
            return
        for index in range(self._backups - 1, 0, -1):
            older = self._path.with_name(f"{self._path.name}.{index}")
            if older.exists():
                older.replace(self._path.with_name(f"{self._path.name}.{index + 1}"))
        self._path.replace(self._path.with_name(f"{self._path.name}.1"))

    def msg(self, message: str) -> None:
        data = (message + "\n").encode("utf-8")
        with self._lock:
            try:
                try:
                    size = self._path.stat().st_size
                except FileNotFoundError:
                    size = 0
                if size and size + len(data) > self._max_bytes:
                    self._rotate()
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
                self.records += 1
                self.last_error = None
            except OSError as exc:  # the audit file must never take a tool call down; health shows it
                error = f"{type(exc).__name__}: {exc.strerror or exc}"
                if self.last_error is None:
                    _log.error("audit_write_failed", path=str(self._path), error=error)
                self.last_error = error

    info = msg


class AuditLog:
    def __init__(self, path: Path, *, max_bytes: int, backups: int, redactor: Redactor) -> None:
        self.path = path
        self._writer = _RotatingWriter(path, max_bytes, backups)
        self._redactor = redactor

        def _redact(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
            return dict(redactor.any(event))

        self._log = structlog.wrap_logger(
            self._writer,
            processors=[_redact, structlog.processors.JSONRenderer(sort_keys=False)],
            cache_logger_on_first_use=False,
        )

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
    ) -> None:
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
            arguments=self._redactor.arguments(arguments),
            **({"incident": incident} if incident else {}),
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

    def status(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "records_written": self._writer.records,
            "healthy": self._writer.last_error is None,
            "last_error": self._writer.last_error,
        }
