"""Every acceptance phase, in run order. A capability that lands adds its module to ``MODULES`` and removes
its ``not_built`` line (see ``acceptance/_registry.py``). ``redaction`` stays last: it searches every output
the run produced before it."""

from __future__ import annotations

import importlib

__all__ = ["MODULES"]

MODULES = (
    "execution",
    "multiplex",
    "isolation",
    "classify",
    "upstream",
    "startup",  # spawns its own gateways over stdio, libtmux-mcp as their upstream
    "guard",
    "conformance",
    "systemd",
    "admin",
    "burnin",
    "files",  # after multiplex and burnin: its calls boot the target's agent, which then carries their calls
    "tasks",
    "mcp_tasks",
    "agent_channel",
    "forwards",
    "transfers",
    "oauth",
    "sessions",
    "root",
    "approvals",  # after root: the same root target, a gateway of its own with approval rules
    "system",
    "fleet",
    "audit",  # after every gateway the run starts, before redaction (which searches its outputs too)
    "redaction",
)

for _module in MODULES:
    importlib.import_module(f"acceptance.phases.{_module}")  # registers its phases, in this order

# Every capability of the open issues has its phase; one that has not landed yet is listed here with
# acceptance._registry.not_built(name, title, what) until it does.
