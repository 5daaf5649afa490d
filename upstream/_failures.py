"""Naming a failed connection attempt: a short class for counters, and a sentence for people.

The sentence is built from what this package knows itself (the configured command, the time limits
that applied), never from an upstream's own error text, which may carry anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcp.shared.exceptions import MCPError

from upstream._settings import UpstreamSettings
from upstream._transport import LOCAL_MARK

__all__ = ["connect_timeout", "describe", "error_class", "leaf", "liveness_timeout"]


def leaf(exc: BaseException) -> BaseException:
    """The first innermost exception of nested exception groups (the SDK wraps entry errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def error_class(exc: BaseException) -> str:
    exc = leaf(exc)
    if isinstance(exc, MCPError):
        data = exc.data
        if isinstance(data, Mapping) and LOCAL_MARK in data:
            return str(data.get("error_class", "TransportError"))
        return f"MCPError({exc.code})"
    return type(exc).__name__


def describe(exc: BaseException, settings: UpstreamSettings) -> str:
    """One sentence on why an attempt failed (for health's `last_error` and the log)."""
    exc = leaf(exc)
    name = error_class(exc)
    if settings.transport == "stdio" and isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
        command = settings.command[0]
        if isinstance(exc, FileNotFoundError) and "/" not in command:
            return f"cannot start {command!r}: not found on PATH ({name})"
        reason = exc.strerror or str(exc)
        return f"cannot start {command!r}: {reason} ({name})"
    if isinstance(exc, UnicodeDecodeError):
        return f"the upstream wrote bytes that are not UTF-8 ({name})"
    if isinstance(exc, MCPError) and name.startswith("MCPError("):
        return f"the upstream answered the handshake or tools/list with JSON-RPC error {exc.code}"
    if settings.bearer_token_file is not None and isinstance(exc, (OSError, ValueError)):
        return f"cannot read bearer_token_file {str(settings.bearer_token_file)!r} ({name})"
    return name


def connect_timeout(settings: UpstreamSettings) -> str:
    return (
        f"connect, handshake and tools/list did not finish within connect_timeout_s = "
        f"{settings.connect_timeout_s:g}s"
    )


def liveness_timeout(settings: UpstreamSettings) -> str:
    return f"no liveness probe answered within liveness_timeout_s = {settings.liveness_timeout_s:g}s"
