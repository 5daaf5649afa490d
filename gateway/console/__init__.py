"""The operator console: what the agents are doing, live, and the approve / deny pages.

Modules:

- ``auth`` — who is an operator (the operator token's session, the trusted proxy's operator group), CSRF.
- ``html`` — the page frame: strict CSP (inline style and script by hash), ``no-store``, phone width.
- ``feed`` — the last N calls from the audit stream and approval changes, as server-sent events.
- ``views`` — the sections: approvals, calls, tasks with output tails, sessions, forwards, targets, upstreams.
- ``pages`` — the routes: ``/console``, its events and login, ``/approvals/{id}`` and the decision.
"""
