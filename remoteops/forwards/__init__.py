"""Port forwards as dedicated ``ssh -N`` processes, recorded so they survive a gateway restart.

Modules:

- ``models`` — what was asked for, the process that carries it, its health.
- ``errors`` — failures of managed forwards, a branch of the remoteops exception tree.
- ``proc`` — the process behind a forward: argv, confirmed start, identity, identity-safe stop.
- ``store`` — forward records in the atomic state store (kind ``forward``).
- ``health`` — real health checks of a forward, each reported on its own.
- ``manager`` — :class:`ForwardManager`: create, list, status, close, adopt after a restart.
"""
