"""Thin MCP tool adapters over remoteops and upstream: one module per capability group.

Modules:

- ``_base`` — shared pieces of the adapters: the strict input base model.
- ``_registry`` — tool declarations next to their handlers (``@group.tool(...)``), one group per module.
- ``health`` — ``gateway_health``: what the gateway is, what it serves, how its parts are doing.
- ``remote`` — targets and ``remote_exec``.
- ``root`` — ``remote_root_exec``: ``remote_exec`` as root, on the root allow-list only.
- ``files`` — structured remote files (stat, list, write, patch, ...).
- ``files_paths`` — the path arguments the file tools share (``path`` or ``path_b64``).
- ``files_read`` — ``remote_read``.
- ``files_search`` — ``remote_find`` and ``remote_grep``.
- ``tasks`` — long-running remote tasks.
- ``sessions`` — interactive sessions on a target's tmux.
- ``transfers`` — ``remote_upload``, ``remote_download``, ``remote_sync``.
- ``forwards`` — managed SSH port forwards.
- ``system`` — system inspection (info, processes, ports, disk, GPUs) and ``process_signal``.
- ``systemd`` — systemd units, the journal and ``admin_transaction``.
- ``fleet`` — ``exec_many``, ``root_exec_many``, ``upload_many``: one job on many targets.
- ``fleet_models`` — the fleet tools' arguments (selector, batching) and results (records, summary).
- ``fleet_run`` — one fleet run for the caller: selector, progress, audit facts, records into results.
"""

from __future__ import annotations

from gateway._catalog import AnySpec
from gateway.tools import (
    files,
    files_search,
    fleet,
    forwards,
    health,
    remote,
    root,
    sessions,
    system,
    systemd,
    tasks,
    transfers,
)

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
        *system.SPECS,
        *systemd.SPECS,
        *fleet.SPECS,
    ]
