"""Long-running remote tasks that survive a gateway restart.

Modules:

- ``models`` — records and results of tasks and their settings.
- ``errors`` — the task errors (``TaskError`` and its kinds, on the core's scoped base).
- ``scripts`` — the POSIX sh programs that run a task on the target (on stdin, arguments as data).
- ``wire`` — run one task program on the target and turn its answer into a typed value.
- ``upkeep`` — command checks before a start, reconciling records after a restart, retention.
- ``manager`` — :class:`RemoteTasks`: start detached, read by byte offset, wait, cancel, recover.
"""
