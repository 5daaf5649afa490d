"""systemd on a target: units (status, list, dependencies, actions, daemon-reload), the journal, and
reversible admin transactions.

Modules:

- ``names`` — the one closed grammar of unit names (pydantic constrained types).
- ``models`` — typed records: unit status, lists, dependencies, action results, journal pages.
- ``errors`` — systemd failures, a branch of the remoteops exception tree.
- ``runner`` — what the operations ask of the facade, and ``privilege: auto | user | root`` for them.
- ``operations`` — :class:`RemoteSystemd` (``ops.systemd``).
- ``journal`` — ``journalctl -o json`` read by cursor.
- ``transaction`` — one reversible change with health gates and a verified rollback.
- ``txfile`` — the transaction's file: through the agent, else over exec; as root where allowed.
- ``fileexec`` — the transaction's file read and replaced over exec (as root, or without an agent).
"""
