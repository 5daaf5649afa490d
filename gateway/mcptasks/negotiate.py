"""Who speaks tasks, and which calls become one.

* **2026-07-28** (the ``io.modelcontextprotocol/tasks`` extension): a client declares the extension on each
  request, in ``params._meta["io.modelcontextprotocol/clientCapabilities"].extensions``; the server alone
  decides per call. A request without the declaration never gets a task.
* **2025-11-25** (the tasks utility): the client asks per call with a ``task`` param, for tools whose
  ``execution.taskSupport`` allows it; the server lists ``"optional"`` for the tools that may run as tasks
  (to clients that declared the ``tasks`` capability, so no other client sees a changed tool list).

:func:`wants_task` is the gateway's decision: tools in ``mcp_tasks.always``, and calls whose ``timeout_s``
is at least ``mcp_tasks.threshold_s``. Relayed upstream tools never become gateway tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import McpTaskSettings

__all__ = [
    "CLIENT_CAPABILITIES_META",
    "EXTENSION_ID",
    "THRESHOLD_TOOLS",
    "declares_extension",
    "may_run_as_task",
    "wants_task",
]

EXTENSION_ID = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
THRESHOLD_TOOLS = frozenset({"remote_exec", "task_wait", "session_wait_for", "remote_root_exec"})
"""Own tools with a ``timeout_s`` argument that says how long the call may take."""


def declares_extension(params: Mapping[str, Any] | None) -> bool:
    """The request's own ``_meta`` declares the tasks extension (2026-07-28 per-request capabilities)."""
    meta = (params or {}).get("_meta")
    caps = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None
    extensions = caps.get("extensions") if isinstance(caps, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(EXTENSION_ID), Mapping)


def may_run_as_task(settings: McpTaskSettings, tool: str) -> bool:
    """The tools listed with ``taskSupport: "optional"`` (2025-11-25): those :func:`wants_task` can pick."""
    return settings.enabled and (tool in settings.always or tool in THRESHOLD_TOOLS)


def wants_task(settings: McpTaskSettings, tool: str, arguments: Mapping[str, Any]) -> bool:
    """The server's per-call decision for a client that declared the extension."""
    if not settings.enabled:
        return False
    if tool in settings.always:
        return True
    if tool not in THRESHOLD_TOOLS:
        return False
    timeout = arguments.get("timeout_s")
    return (
        isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout >= settings.threshold_s
    )
