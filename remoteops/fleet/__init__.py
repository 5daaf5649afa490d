"""Fleet operations: one job on many targets with forks, serial batches, a canary and a failure budget.

The jobs are the caller's (the gateway gives each target ``RemoteOps.run`` or ``Transfers.upload``: the
exec path and transfer machinery of the single-target tools); this package never imports the facade.

Modules:

- ``models`` — fleet settings, selectors, the plan and the per-target records of a run.
- ``selectors`` — selector resolution against the allow-list and the caller's grants, before any connect.
- ``plan`` — batch sizes (canary first, then ``serial`` batches) and the failure budget.
- ``runner`` — :class:`FleetRunner`: batches, forks, time limits, cancellation, a callback per target.
- ``summary`` — identical-output groups, and what counts as a command's success.
"""
