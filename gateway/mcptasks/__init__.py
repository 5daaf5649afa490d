"""MCP Tasks: long tool calls answered with a durable task handle.

Both generations the gateway serves: the ``io.modelcontextprotocol/tasks`` extension (SEP-2663) on
2026-07-28 and the experimental tasks utility of 2025-11-25 (``docs/mcp-tasks.md``).

Modules:

- ``records`` — the task record kept in the state store, statuses, generations.
- ``store`` — records in memory and on disk, bound to their principal, expired after their ttl.
- ``negotiate`` — who declared the extension, and which calls become a task.
- ``remote`` — a ``remote_exec`` as a remote task: the watcher, the time limit, the ``ExecResult``.
- ``runner`` — :class:`McpTasks`: creation, local work, input, cancel, what a restart finds.
- ``relayed`` — an upstream's own tasks passed through: the bounded id map, routing, audit, errors.
- ``wire`` — records in each generation's wire shape.
- ``protocol`` — the ``tasks/*`` methods and the ``tools/call`` middleware on the SDK's ``Server``.
"""

from gateway.mcptasks.negotiate import EXTENSION_ID, declares_extension, may_run_as_task, wants_task
from gateway.mcptasks.protocol import Plan, TaskHooks, install, server_tasks_capability
from gateway.mcptasks.records import TERMINAL, Generation, McpTaskRecord, McpTaskStatus
from gateway.mcptasks.relayed import RelayedCreate, RelayedTask, RelayedTasks, created_task_id
from gateway.mcptasks.remote import RemoteCommand
from gateway.mcptasks.runner import LocalRun, McpTasks
from gateway.mcptasks.store import McpTaskNotFound

__all__ = [
    "EXTENSION_ID",
    "TERMINAL",
    "Generation",
    "LocalRun",
    "McpTaskNotFound",
    "McpTaskRecord",
    "McpTaskStatus",
    "McpTasks",
    "Plan",
    "RelayedCreate",
    "RelayedTask",
    "RelayedTasks",
    "RemoteCommand",
    "TaskHooks",
    "created_task_id",
    "declares_extension",
    "install",
    "may_run_as_task",
    "server_tasks_capability",
    "wants_task",
]
