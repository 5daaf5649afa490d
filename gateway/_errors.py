"""The gateway's error vocabulary and the one place foreign exceptions become tool errors.

Exception tree::

    GatewayError                     base of everything the gateway raises itself
    ├── ConfigError                  bad configuration or state files (startup fails; names key/path)
    ├── StartupError                 the environment refuses to let it start (port in use; names it)
    └── ToolFailure                  a tool call failed; carries {code, message, retryable, details}

Every failure that reaches an MCP client is a ``ToolFailure`` rendered as an ``isError`` result without
``structuredContent``: the error ``{code, message, retryable, details}`` is the JSON text
``{"error": {...}}`` and sits in ``_meta["remoteops-gateway/error"]`` (``gateway._dispatch.error_result``).
``code`` is always one of :class:`ErrorCode` — a closed vocabulary documented in the README (a test keeps
the two in step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

__all__ = [
    "ERROR_DESCRIPTIONS",
    "ConfigError",
    "ErrorCode",
    "GatewayError",
    "StartupError",
    "ToolFailure",
]


class ErrorCode(StrEnum):
    VALIDATION_ERROR = "validation_error"
    POLICY_DENIED = "policy_denied"
    UNKNOWN_TARGET = "unknown_target"
    HOST_KEY_ERROR = "host_key_error"
    AUTH_ERROR = "auth_error"
    CONNECT_ERROR = "connect_error"
    TRANSPORT_LOST = "transport_lost"
    TIMEOUT = "timeout"
    REMOTE_NONZERO_EXIT = "remote_nonzero_exit"
    MISSING_REMOTE_CAPABILITY = "missing_remote_capability"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    PRIVILEGE_ERROR = "privilege_error"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    UPSTREAM_AMBIGUOUS = "upstream_ambiguous"
    INTERNAL_ERROR = "internal_error"


ERROR_DESCRIPTIONS: Mapping[ErrorCode, tuple[bool, str]] = {
    # code: (retryable by default, meaning)
    ErrorCode.VALIDATION_ERROR: (
        False,
        "Arguments do not match the tool's input schema, or exceed a size cap.",
    ),
    ErrorCode.POLICY_DENIED: (
        False,
        "The operator's policy forbids this (target not allow-listed, tool disabled).",
    ),
    ErrorCode.UNKNOWN_TARGET: (False, "The target name or host cannot be resolved by OpenSSH."),
    ErrorCode.HOST_KEY_ERROR: (False, "The target's host key is unknown or changed; nothing was run."),
    ErrorCode.AUTH_ERROR: (False, "SSH authentication was refused; nothing was run."),
    ErrorCode.CONNECT_ERROR: (
        True,
        "The target could not be reached (refused, timed out, no route); nothing ran.",
    ),
    ErrorCode.TRANSPORT_LOST: (
        False,
        "The connection died while the command may have been running; it may or may not have run "
        "and is never re-run automatically.",
    ),
    ErrorCode.TIMEOUT: (False, "A time limit was reached; details say what is known about the remote side."),
    ErrorCode.REMOTE_NONZERO_EXIT: (False, "A remote step the tool depends on exited non-zero."),
    ErrorCode.MISSING_REMOTE_CAPABILITY: (False, "The target lacks a program the operation needs."),
    ErrorCode.NOT_FOUND: (False, "The named object (file, task, session, forward) does not exist."),
    ErrorCode.CONFLICT: (False, "A precondition failed (object changed, already exists, in use)."),
    ErrorCode.CHECKSUM_MISMATCH: (False, "Data did not match its expected SHA-256."),
    ErrorCode.PRIVILEGE_ERROR: (False, "Privilege escalation was refused or failed."),
    ErrorCode.UPSTREAM_UNAVAILABLE: (True, "The upstream MCP server is unreachable; the call was not sent."),
    ErrorCode.UPSTREAM_AMBIGUOUS: (
        False,
        "The upstream connection was lost after the call was sent; it may or may not have run.",
    ),
    ErrorCode.INTERNAL_ERROR: (False, "An unexpected gateway fault; the incident id is in the gateway log."),
}


class GatewayError(Exception):
    """Base of the gateway's own exceptions."""


class ConfigError(GatewayError):
    """Invalid configuration. ``source`` is the file or environment variable, ``key`` the dotted key."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        self.problems: tuple[ConfigError, ...] = (self,)
        """Every problem found (``config check`` shows each); the message joins them."""
        where = ""
        if key:
            where += f" key {key!r}"
        if source:
            where += f" in {source}"
        super().__init__(f"{message}{' (' + where.strip() + ')' if where else ''}")

    @classmethod
    def of(cls, problems: Sequence[ConfigError]) -> ConfigError:
        """One error carrying all ``problems`` (one line: ``first; second; …``)."""
        if len(problems) == 1:
            return problems[0]
        joined = cls("; ".join(str(p) for p in problems))
        joined.source, joined.key = problems[0].source, problems[0].key
        joined.problems = tuple(problems)
        return joined


class StartupError(GatewayError):
    """The gateway cannot start for a reason outside its configuration's validity (e.g. a port in use)."""


class ToolFailure(GatewayError):
    """A structured tool error: what the MCP client receives as ``{"error": ...}`` (text and ``_meta``)."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = ERROR_DESCRIPTIONS[code][0] if retryable is None else retryable
        self.details: dict[str, Any] = dict(details or {})

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }
