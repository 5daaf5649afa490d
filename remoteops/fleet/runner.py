"""The fleet runner: one job per target, in batches, at most ``forks`` in flight, with a canary, a failure
budget, per-target and overall time limits, cancellation and a callback per finished target.

Each job runs in its own cancel scope, so a slow or hung target only ever holds its own fork: the others'
results arrive in their own time. :meth:`FleetRunner.cancel` (and the overall time limit) stops starting
new targets and cancels the running jobs (the exec seam kills their remote commands on the way out); those
records are ``cancelled``, the ones never started ``skipped`` with the reason. A cancellation of the
caller itself propagates as always (nothing here swallows it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

from remoteops._errors import CommandTimeout, PolicyDenied
from remoteops.fleet.models import FleetPlan, FleetRun, SkipReason, TargetRecord
from remoteops.fleet.plan import batch_sizes, tolerated

__all__ = ["FleetRunner", "OnDone"]

T = TypeVar("T")
OnDone = Callable[[TargetRecord[T], int, int], Awaitable[None]]
"""Called once per finished target (``record``, targets finished so far, targets started or to start)."""


class FleetRunner(Generic[T]):
    """``await FleetRunner(names, plan, job, succeeded=...).run()``: every name's record, in order."""

    def __init__(
        self,
        names: Sequence[str],
        plan: FleetPlan,
        job: Callable[[str], Awaitable[T]],
        *,
        succeeded: Callable[[T], bool],
        denied: Sequence[tuple[str, PolicyDenied]] = (),
        on_done: OnDone[T] | None = None,
        target_ceiling_s: float | None = None,
        overall_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``target_ceiling_s`` bounds each job from its start (connect, resolve and all): past it the job
        is cancelled and its record is an ``error`` (:class:`CommandTimeout`)."""
        self._names = list(names)
        self._plan = plan
        self._job = job
        self._succeeded = succeeded
        self._denied = list(denied)
        self._on_done = on_done
        self._target_ceiling_s = target_ceiling_s
        self._overall_s = overall_timeout_s
        self._clock = clock
        self._records = {name: TargetRecord[T](target=name, outcome="skipped") for name in self._names}
        self._scopes: set[anyio.CancelScope] = set()
        self._killed: set[anyio.CancelScope] = set()  # cancelled by cancel(), not by their own ceiling
        self._stop: SkipReason | None = None
        self._failures = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._finished = 0
        self._t0 = 0.0

    @property
    def stopped(self) -> SkipReason | None:
        return self._stop

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def cancel(self, reason: SkipReason = "cancelled") -> None:
        """Start no new target; cancel the running ones (idempotent)."""
        if self._stop is None or reason in ("cancelled", "overall_timeout"):
            self._stop = reason
        for scope in list(self._scopes):
            self._killed.add(scope)
            scope.cancel()

    async def run(self) -> FleetRun[T]:
        self._t0 = self._clock()
        total = len(self._names)
        budget = tolerated(total, self._plan)
        sizes = batch_sizes(total, self._plan)
        has_canary = self._plan.canary > 0 and total > 0
        run = FleetRun[T]()
        async with anyio.create_task_group() as watch:
            if self._overall_s is not None:
                watch.start_soon(self._overall_limit, self._overall_s)
            start = 0
            for index, size in enumerate(sizes):
                batch = self._names[start : start + size]
                start += size
                self._check_budget(budget)
                if self._stop is not None:
                    break
                run.batches += 1
                await self._batch(batch, index if has_canary else index + 1, budget)
                canary = has_canary and index == 0 and self._stop is None
                if canary and any(self._records[n].outcome != "succeeded" for n in batch):
                    self._stop = "canary_failed"
            watch.cancel_scope.cancel()
        for name in self._names:
            record = self._records[name]
            if record.outcome == "skipped" and record.started_s is None:
                record.reason = self._stop or "cancelled"
        denied = [
            TargetRecord[T](target=name, outcome="denied", error=exc, reason=getattr(exc, "reason", None))
            for name, exc in self._denied
        ]
        run.records = denied + [self._records[name] for name in self._names]
        run.wall_s = self._clock() - self._t0
        run.max_in_flight = self._max_in_flight
        run.stopped = self._stop
        return run

    def _check_budget(self, budget: int | None) -> None:
        if budget is not None and self._failures > budget and self._stop is None:
            self._stop = "failure_budget"

    async def _overall_limit(self, limit_s: float) -> None:
        await anyio.sleep(limit_s)
        self.cancel("overall_timeout")

    async def _batch(self, batch: list[str], number: int, budget: int | None) -> None:
        forks = anyio.Semaphore(self._plan.forks)
        async with anyio.create_task_group() as tg:
            for name in batch:
                await forks.acquire()
                self._check_budget(budget)
                if self._stop is not None:
                    forks.release()
                    break
                scope = anyio.CancelScope()
                self._scopes.add(scope)
                self._in_flight += 1
                self._max_in_flight = max(self._max_in_flight, self._in_flight)
                record = self._records[name]
                record.batch = number
                record.started_s = self._clock() - self._t0
                tg.start_soon(self._one, record, scope, forks)

    async def _one(self, record: TargetRecord[T], scope: anyio.CancelScope, forks: anyio.Semaphore) -> None:
        started = self._clock()
        try:
            with scope:
                if self._target_ceiling_s is not None:
                    scope.deadline = anyio.current_time() + self._target_ceiling_s
                try:
                    value = await self._job(record.target)
                except Exception as exc:  # one target's failure is its record, never the whole run's
                    record.outcome, record.error = "error", exc
                else:
                    record.value = value
                    record.outcome = "succeeded" if self._succeeded(value) else "failed"
            if scope.cancelled_caught:
                if scope in self._killed:
                    record.outcome, record.reason = "cancelled", self._stop
                else:  # its own ceiling
                    limit = self._target_ceiling_s or 0.0
                    record.outcome = "error"
                    record.error = CommandTimeout(
                        f"the target did not finish within {limit:g} s (connect, run and all); stopped",
                        target=record.target,
                        time_limit_s=limit,
                        remote_killed=False,
                    )
            record.duration_s = self._clock() - started
            if record.outcome in ("failed", "error"):
                self._failures += 1
        finally:
            self._scopes.discard(scope)
            self._killed.discard(scope)
            self._in_flight -= 1
            forks.release()
        self._finished += 1
        if self._on_done is not None:
            await self._on_done(record, self._finished, len(self._names))
