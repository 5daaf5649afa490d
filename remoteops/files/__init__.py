"""Structured file operations on a target, carried as agent requests.

Modules:

- ``models`` — records of the file operations (stat, read, write, list, mkdir, move, delete, grep).
- ``errors`` — their failures, a branch of the remoteops exception tree.
- ``requests`` — the argument rules of file requests (mode, SHA-256, depth, grep bounds, bytes or lines).
- ``wire`` — paths to and from the agent's wire, answers to records, refusals to errors.
- ``patch`` — exact-text patches: every hunk checked first, then one atomic write.
- ``operations`` — :class:`RemoteFiles`, the operations themselves.
"""
