"""Persistent interactive shell sessions on the target's tmux, adopted again after a gateway restart.

Modules:

- ``models`` — records and results of sessions and their settings.
- ``errors`` — the session errors (``SessionError`` and its kinds, on the core's scoped base).
- ``scripts`` — the POSIX sh programs that drive tmux on the target (on stdin, arguments as data).
- ``wire`` — run one session program on the target and turn its answer into a typed value.
- ``read`` — the checked plan of a send, and what a read on the target turns into (:class:`SessionRead`).
- ``manager`` — :class:`RemoteSessions`: ensure, send, read, wait, close, adopt.
"""
