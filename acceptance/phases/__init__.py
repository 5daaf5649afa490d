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
    "root",
    "redaction",
)

for _module in MODULES:
    importlib.import_module(f"acceptance.phases.{_module}")  # registers its phases, in this order

not_built("transfers", "transfers: rsync/scp over the master, resumable, verified", "transfer tools")
not_built("forwards", "port forwards over the master (-L/-R/-D), listed and cancelled", "forward tools")
not_built("tasks", "long-running remote tasks: start, poll, cancel, survive reconnects", "task tools")
not_built("sessions", "interactive remote sessions (pty) with bounded output", "session tools")
not_built("oauth", "OAuth resource server: token verification, scopes, audience", "OAuth resource server")
not_built("agent_channel", "a persistent per-target channel carrying many commands", "agent channel carrier")
