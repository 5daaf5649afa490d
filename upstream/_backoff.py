"""Capped exponential backoff with jitter, reset only by a functional success."""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["Backoff"]


class Backoff:
    """Delay policy for reconnect attempts.

    After the n-th consecutive failure (n starting at 1) the base delay is
    `min(max_s, initial_s * multiplier ** (n - 1))`; jitter then shortens it by up to
    `jitter * base` (never lengthens it, so the cap holds). `reset()` is called by the
    supervisor only once a functional tools/list succeeded on a new connection.
    `rand` returns a float in [0, 1) and is injectable for deterministic tests.
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
        self.initial_s = initial_s
        self.max_s = max_s
        self.multiplier = multiplier
        self.jitter = jitter
        self._rand = rand if rand is not None else random.SystemRandom().random
        self.failures = 0

    def base_delay(self, failures: int) -> float:
        """The un-jittered delay after `failures` consecutive failures (0 → no delay)."""
        if failures <= 0:
            return 0.0
        # Cap the exponent before computing so huge failure counts cannot overflow.
        exponent = min(failures - 1, 1024)
        try:
            raw = self.initial_s * self.multiplier**exponent
        except OverflowError:
            return self.max_s
        return min(self.max_s, raw)

    def fail(self) -> float:
        """Record a failed attempt and return how long to wait before the next one."""
        self.failures += 1
        base = self.base_delay(self.failures)
        return base * (1.0 - self.jitter * self._rand())

    def reset(self) -> None:
        """Forget past failures (call only after a functional success)."""
        self.failures = 0
