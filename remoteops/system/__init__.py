"""System inspection of a target (what runs, what listens, what fills the disk, the GPUs) and signalling
one process whose identity still matches, each read one POSIX sh program on stdin (``sh/*.sh``) whose output
is parsed from machine-readable sources (``/proc`` files, ``ss``'s one-line records, ``df -P``,
``find -printf``, CSV).

Modules:

- ``models`` — the typed records (system info, processes, ports, disk usage, GPUs, a signal's outcome).
- ``errors`` — their failures, a branch of the remoteops exception tree.
- ``parse`` — each program's output to its records (pure functions).
- ``operations`` — :class:`RemoteSystem`, the operations themselves.
"""
