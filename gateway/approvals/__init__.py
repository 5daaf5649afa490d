"""Human approvals of risky calls: rules in the configuration, a gate before the call runs.

Modules:

- ``rules`` — which calls need approval (``[[approvals.rules]]``) and the hashed request a human is shown.
- ``hub`` — the approvals waiting for a human, their decisions, who may decide (never the caller).
- ``gate`` — the gate in the dispatch path: reach the human, wait (bounded, with progress), re-check.
- ``diff`` — the change a ``remote_write`` or ``remote_patch`` would make, for the approval page.
"""
