"""The record of one MCP task, as kept in the state store (``<state_dir>/mcp_tasks/<id>.json``, 0600).

A record holds what a later ``tasks/get`` must answer, after any number of gateway restarts: who created it
(the principal it is bound to), which protocol generation it was created in, its status, and either the
remote task that does the work (``remote_task``: a ``remote_exec`` runs as a detached remoteops task) or
nothing that survives a restart (``durable = False``: work in the gateway process, such as a transfer).
Arguments are not kept: they may carry payloads, and nothing needs them once the work has started.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from remoteops import Collection

__all__ = [
    "MCP_TASKS",
    "TERMINAL",
    "Generation",
    "McpTaskRecord",
    "McpTaskStatus",
    "iso",
]

McpTaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
Generation = Literal["v1", "v2"]
"""``v1``: the 2025-11-25 tasks utility (``task`` param, ``tasks/result``); ``v2``: the
``io.modelcontextprotocol/tasks`` extension of 2026-07-28 (``resultType: "task"``, ``tasks/update``)."""
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def iso(epoch_s: float) -> str:
    """ISO 8601 in UTC with milliseconds and a ``Z``, as the spec's examples write it."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class McpTaskRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    principal: str
    """The caller's label (``Principal.label``); any other caller is told the task does not exist."""
    generation: Generation
    tool: str
    target: str | None = None
    status: McpTaskStatus = "working"
    status_message: str | None = None
    created_at: float
    updated_at: float
    ttl_ms: int
    poll_interval_ms: int
    durable: bool
    """True when the work survives a gateway restart (a remote task on the target)."""
    remote_task: str | None = None
    """The remoteops task id running the command (``remote_exec`` as a task)."""
    deadline: float | None = None
    """Epoch seconds after which the remote command is stopped (the call's ``timeout_s``)."""
    timed_out: bool = False
    cancel_requested: bool = False
    result: dict[str, Any] | None = None
    """The final ``CallToolResult`` (wire form), once completed."""
    exec_result: dict[str, Any] | None = None
    """The ``ExecResult`` of a ``remote_exec`` task; rendered into the ``CallToolResult`` when read."""
    failure: dict[str, Any] | None = None
    """A tool failure ``{code, message, retryable, details}``: rendered as an ``isError`` result."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error ``{code, message}`` of a failed task."""
    input_requests: dict[str, Any] | None = None
    """Outstanding requests of an ``input_required`` task (the password page's URL elicitation)."""
    request_state: str | None = None
    answered: tuple[str, ...] = ()
    """Input keys already answered: never issued again for this task."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def expires_at(self) -> float:
        return self.created_at + self.ttl_ms / 1000


MCP_TASKS: Collection[McpTaskRecord] = Collection("mcp_tasks", McpTaskRecord, version=1)
