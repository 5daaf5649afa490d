"""Thin MCP tool adapters over remoteops and upstream: one module per capability group."""

from __future__ import annotations

from gateway._catalog import AnySpec
from gateway.tools import files, files_search, forwards, health, remote, root, sessions, tasks, transfers

__all__ = ["all_specs"]


def all_specs() -> list[AnySpec]:
    """Every own tool, in catalog order."""
    return [
        *health.SPECS,
        *remote.SPECS,
        *root.SPECS,
        *files.SPECS,
        *files_search.SPECS,
        *tasks.SPECS,
        *sessions.SPECS,
        *transfers.SPECS,
        *forwards.SPECS,
    ]
