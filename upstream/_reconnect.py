"""The reconnect policy, on tenacity: capped exponential backoff with jitter, reset only by a working
tools/list, one attempt in flight at a time.

One *outage* is one `tenacity.AsyncRetrying` run (`Backoff.retrying`): tenacity numbers the attempts,
asks `Backoff` how long to wait before the next one and sleeps through `anyio.sleep` (cancellable).
A run ends at the first attempt that reports a working connection (its handshake and tools/list
succeeded); the next outage is a new run, so its delays start over from `initial_s` — that is the only
reset. The supervisor task is the only caller of `retrying`, which keeps attempts single-flight.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_never
from tenacity.wait import wait_exponential

__all__ = ["Backoff"]


def _not_working(working: object) -> bool:
    return not working


class Backoff(wait_exponential):
    """tenacity wait strategy: the delay after the n-th consecutive failed attempt (n from 1).

    The base delay is tenacity's capped exponential, `min(max_s, initial_s * multiplier ** (n - 1))`
    (overflow-safe); jitter then shortens it by up to `jitter * base` — never lengthens it, so the cap
    holds. `rand` returns a float in [0, 1) and is injectable for deterministic tests.
    """

    def __init__(
        self,
        *,
        initial_s: float,
        max_s: float,
        multiplier: float,
        jitter: float,
        rand: Callable[[], float] | None = None,
    ) -> None:
        if initial_s <= 0 or max_s < initial_s or multiplier < 1 or not 0 <= jitter <= 1:
            raise ValueError("invalid backoff parameters")
        super().__init__(multiplier=initial_s, max=max_s, exp_base=multiplier)
        self.initial_s = initial_s
        self.max_s = max_s
        self.jitter = jitter
        self._rand = rand if rand is not None else random.SystemRandom().random

    def __call__(self, retry_state: RetryCallState) -> float:
        base: float = super().__call__(retry_state)
        return base * (1.0 - self.jitter * self._rand())

    def retrying(
        self,
        *,
        before_sleep: Callable[[RetryCallState], Awaitable[None] | None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> AsyncRetrying:
        """One outage: `await retrying(attempt)`; `attempt()` returns something truthy once it had a
        working connection (the run ends and returns it); a falsy result is a failure, then a wait.
        Never stops by itself; cancellation (and only cancellation) propagates."""
        return AsyncRetrying(
            wait=self,
            retry=retry_if_result(_not_working),
            stop=stop_never,
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
