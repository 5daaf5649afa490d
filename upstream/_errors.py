"""The one exception tree of the `upstream` package.

```
UpstreamError                      every failure this package raises; .upstream (name), .retryable
├── UpstreamUnavailable            no live connection within call_wait_s; nothing was sent (retryable)
│   └── UpstreamSessionLost        "session not found" twice in a row; nothing ran (retryable)
├── UpstreamAmbiguous              the transport failed after tools/call was sent: it may or may not
│   │                              have run (.tool, .elapsed_s, .cause); never replayed
│   └── UpstreamCallTimeout        the call-timeout ceiling elapsed before an answer (.timeout_s)
├── UpstreamRejected               the upstream answered a JSON-RPC error (.method, .code, .message, .data)
├── UpstreamProtocolError          the upstream answered with invalid MCP (.method)
└── UpstreamClosed                 the Upstream is not running (never entered, or already exited)
```

Foreign exceptions (`mcp.shared.exceptions.MCPError`, `httpx2` transport errors, `OSError` from a stdio
spawn) are translated in one place each: `_calls.py` for call outcomes, `_transport.py` for HTTP.
A `CallToolResult` with `isError: true` is a *result*, not an exception: it is returned unchanged.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "UpstreamAmbiguous",
    "UpstreamCallTimeout",
    "UpstreamClosed",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamRejected",
    "UpstreamSessionLost",
    "UpstreamUnavailable",
]


class UpstreamError(Exception):
    """Base of every exception raised by `upstream`."""

    retryable: bool = False

    def __init__(self, message: str, *, upstream: str) -> None:
        super().__init__(message)
        self.upstream = upstream


class UpstreamUnavailable(UpstreamError):
    """No working connection to the upstream within the caller's wait bound; the request was not sent."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        upstream: str,
        state: str,
        waited_s: float,
        last_error: str | None,
    ) -> None:
        super().__init__(message, upstream=upstream)
        self.state = state
        self.waited_s = waited_s
        self.last_error = last_error


class UpstreamSessionLost(UpstreamUnavailable):
    """The upstream answered "session not found" again right after a fresh session was made."""


class UpstreamAmbiguous(UpstreamError):
    """The connection failed after the call was sent: it may or may not have run. Not replayed."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        upstream: str,
        tool: str,
        elapsed_s: float,
        cause: str,
    ) -> None:
        super().__init__(message, upstream=upstream)
        self.tool = tool
        self.elapsed_s = elapsed_s
        self.cause = cause


class UpstreamCallTimeout(UpstreamAmbiguous):
    """The call-timeout ceiling elapsed; the call was cancelled upstream but may have run."""

    def __init__(self, message: str, *, upstream: str, tool: str, elapsed_s: float, timeout_s: float) -> None:
        super().__init__(message, upstream=upstream, tool=tool, elapsed_s=elapsed_s, cause="TimeoutError")
        self.timeout_s = timeout_s


class UpstreamRejected(UpstreamError):
    """The upstream answered the request with a JSON-RPC error; re-raise it to the client as is."""

    retryable = False

    def __init__(self, *, upstream: str, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"upstream {upstream!r} rejected {method}: [{code}] {message}", upstream=upstream)
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class UpstreamClosed(UpstreamError):
    """The `Upstream` is not running: enter it (or start `run()`) first, or it has already stopped."""


class UpstreamProtocolError(UpstreamError):
    """The upstream answered with something that is not valid MCP (e.g. a malformed result)."""

    def __init__(self, message: str, *, upstream: str, method: str) -> None:
        super().__init__(message, upstream=upstream)
        self.method = method
