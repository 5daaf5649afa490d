"""Every acceptance phase, in run order. A capability that lands adds its module here and removes its
``not_built`` line (see ``acceptance/_registry.py``)."""

from acceptance._registry import not_built
from acceptance.phases import (  # noqa: F401 - importing registers the phases, in this order
    burnin,
    classify,
    conformance,
    execution,
    guard,
    isolation,
    multiplex,
    redaction,
    systemd,
    upstream,
)

not_built("files", "remote files: read, write, edit, checksums", "file tools")
not_built("transfers", "transfers: rsync/scp over the master, resumable, verified", "transfer tools")
not_built("forwards", "port forwards over the master (-L/-R/-D), listed and cancelled", "forward tools")
not_built("tasks", "long-running remote tasks: start, poll, cancel, survive reconnects", "task tools")
not_built("sessions", "interactive remote sessions (pty) with bounded output", "session tools")
not_built(
    "root", "privilege: sudo/su providers, secret entry, root toolset", "root toolset and privilege providers"
)
not_built(
    "oauth", "OAuth resource server: token verification, scopes, audience", "OAuth (issue: auth providers)"
)
not_built(
    "agent_channel", "a persistent per-target agent channel carrying many commands", "agent channel carrier"
)

__all__: list[str] = []
