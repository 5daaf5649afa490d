"""File transfers between the gateway host and targets with rsync or scp over the master.

Modules:

- ``models`` — transfer settings, options and results.
- ``errors`` — the transfer failures, each a branch of the remoteops exception tree.
- ``paths`` — the bounded local side, remote paths as data, and the ssh words rsync/scp get.
- ``probe`` — what is where before and after a transfer: kinds, sizes, partial files, SHA-256.
- ``run`` — running rsync and scp as supervised children and reading what they say.
- ``verify`` — SHA-256 verification of a finished transfer, and what happens to copies that differ.
- ``core`` — the machinery: rsync or scp, their command lines, supervised runs, leftovers.
- ``manager`` — :class:`Transfers`: ``upload``, ``download`` and ``sync``.
"""
