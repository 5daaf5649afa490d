"""What a tool adapter receives: the runtime plus who is calling and how to report progress."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from upstream import ProgressCallback

if TYPE_CHECKING:
    from gateway._runtime import Runtime

__all__ = ["ToolContext"]


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


@dataclass(frozen=True)
class ToolContext:
    runtime: Runtime
    request_id: str
    principal: str
    report_progress: ProgressCallback = _no_progress
    audit_facts: dict[str, Any] = field(default_factory=dict)
    """Facts a tool adds to its call's audit record (e.g. a transfer's paths, sizes and hashes)."""
