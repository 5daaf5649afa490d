"""Secret entry that never passes through the model.

Modules:

- ``broker`` — passwords for the privilege providers, entered by a human, held for one request.
- ``page`` — the one-time entry page: ``GET``/``POST /secret/{token}`` on the gateway's HTTP listener.
- ``listener`` — a loopback-only listener for that page, for gateways not serving HTTP (stdio).
- ``askpass`` — the operator's askpass command: a program on the gateway host that prints a password.
"""
