"""The agent carrier: one long-lived stdlib-only Python program per target and login (and one as root),
sent over the master on the stdin of one SSH session, carrying many exec and file requests.

Modules:

- ``program`` — rog-agent, what runs on the target (stdlib only; it never imports remoteops).
- ``boot`` — how the agent gets onto a target: a tiny loader for ``python3 -c`` reads it from stdin.
- ``channel`` — one live agent session on one target: boot it, multiplex requests, notice its death.
- ``liveness`` — the probe (PING) that finds a stuck agent, bounded from its last sign of life.
- ``slots`` — what the carrier keeps per target: a user slot and a root slot, and the background boot.
- ``exec`` — exec requests and answers on the agent protocol (``RawExec`` from the agent's RESULT).
- ``root`` — the root agent, started through the privilege provider the escalator chose.
- ``carrier`` — :class:`AgentCarrier`: per target one agent channel for every command; ssh where it cannot.
"""
