"""The batching plan: batch sizes (canary first, then ``serial`` batches) and the failure budget.

Percentages are of the targets selected to run (denied ones excluded). A ``serial`` percentage is rounded
down, at least one target per batch. ``max_failures`` is the number of failures tolerated: once more
than that have failed, no new target starts (``0``: the first failure stops the run); a percentage
tolerates ``floor(total * pct / 100)``. The canary batch (the first ``canary`` targets) must succeed
entirely or nothing else starts.
"""

from __future__ import annotations

import math

from remoteops.fleet.models import Count, FleetPlan

__all__ = ["batch_sizes", "tolerated"]


def _of(total: int, value: Count) -> float:
    if isinstance(value, int):
        return float(value)
    return total * float(value.rstrip("%")) / 100


def batch_sizes(total: int, plan: FleetPlan) -> list[int]:
    """The size of each batch, in order; they add up to ``total``."""
    sizes: list[int] = []
    left = total
    canary = min(plan.canary, left)
    if canary:
        sizes.append(canary)
        left -= canary
    size = left if plan.serial is None else max(1, math.floor(_of(total, plan.serial)))
    while left > 0:
        step = min(size, left)
        sizes.append(step)
        left -= step
    return sizes


def tolerated(total: int, plan: FleetPlan) -> int | None:
    """How many failures the run tolerates before it stops starting targets (None: no budget)."""
    if plan.max_failures is None:
        return None
    return math.floor(_of(total, plan.max_failures) + 1e-9)
