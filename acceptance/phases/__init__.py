"""Every acceptance phase, in run order. A capability that lands adds its module to ``MODULES`` and removes
its ``not_built`` line (see ``acceptance/_registry.py``). ``redaction`` stays last: it searches every output
the run produced before it."""

from __future__ import annotations

import importlib

from acceptance._registry import not_built

__all__ = ["MODULES"]

MODULES = (
    "execution",
    "multiplex",
    "isolation",
    "classify",
    "upstream",
    "guard",
    "conformance",
    "systemd",
    "burnin",
    "files",  # after multiplex and burnin: its calls boot the target's agent, which then carries their calls
    "tasks",
    "agent_channel",
    "forwards",
    "transfers",
    "oauth",
    "sessions",
    "redaction",
)

for _module in MODULES:
    importlib.import_module(f"acceptance.phases.{_module}")  # registers its phases, in this order

not_built("root", "privilege: sudo/su providers, secret entry, root toolset", "privilege providers")
