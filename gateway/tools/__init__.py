"""Thin MCP tool adapters over remoteops and upstream: one module per capability group."""

from __future__ import annotations

from typing import Any

from gateway._catalog import ToolSpec
from gateway.tools import forwards, health, remote, tasks

__all__ = ["all_specs"]


def all_specs() -> list[ToolSpec[Any, Any]]:
    """Every own tool, in catalog order."""
    return [*health.SPECS, *remote.SPECS, *tasks.SPECS, *forwards.SPECS]
