"""Records on the wire, in each generation's shape (field names as the schemas spell them).

* 2025-11-25: ``Task`` (``taskId``, ``status``, ``statusMessage``, ``createdAt``, ``lastUpdatedAt``,
  ``ttl``, ``pollInterval``); ``CreateTaskResult`` wraps it as ``{"task": Task}``; the result comes from
  ``tasks/result``.
* 2026-07-28 extension: the task fields inline (``ttlMs``, ``pollIntervalMs``), ``resultType: "task"`` on
  creation and ``"complete"`` on ``tasks/get``, whose ``DetailedTask`` inlines ``result``, ``error`` or
  ``inputRequests`` by status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.mcptasks.negotiate import EXTENSION_ID
from gateway.mcptasks.records import McpTaskRecord, iso

__all__ = [
    "MISSING_CAPABILITY",
    "ResultOf",
    "created_v1",
    "created_v2",
    "detailed_v2",
    "missing_capability_data",
    "task_v1",
]

MISSING_CAPABILITY = -32021
"""Missing Required Client Capability (the extension's error code)."""

ResultOf = Callable[[McpTaskRecord], dict[str, Any]]
"""The final ``CallToolResult`` (wire form) of a completed task."""


def _common(record: McpTaskRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "taskId": record.id,
        "status": record.status,
        "createdAt": iso(record.created_at),
        "lastUpdatedAt": iso(record.updated_at),
    }
    if record.status_message is not None:
        out["statusMessage"] = record.status_message
    return out


def task_v1(record: McpTaskRecord) -> dict[str, Any]:
    """A 2025-11-25 ``Task`` (``input_required`` is never used there: input goes by the link fallback)."""
    return {**_common(record), "ttl": record.ttl_ms, "pollInterval": record.poll_interval_ms}


def created_v1(record: McpTaskRecord) -> dict[str, Any]:
    return {"task": task_v1(record)}


def _task_v2(record: McpTaskRecord) -> dict[str, Any]:
    return {**_common(record), "ttlMs": record.ttl_ms, "pollIntervalMs": record.poll_interval_ms}


def created_v2(record: McpTaskRecord) -> dict[str, Any]:
    return {"resultType": "task", **_task_v2(record)}


def detailed_v2(record: McpTaskRecord, result_of: ResultOf) -> dict[str, Any]:
    out = {"resultType": "complete", **_task_v2(record)}
    if record.status == "completed":  # a 2026-07-28 CallToolResult: its resultType is required
        out["result"] = {**result_of(record), "resultType": "complete"}
    elif record.status == "failed":
        out["error"] = record.error or {"code": -32603, "message": record.status_message or "failed"}
    elif record.status == "input_required":
        out["inputRequests"] = record.input_requests or {}
    return out


def missing_capability_data() -> dict[str, Any]:
    return {"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}
