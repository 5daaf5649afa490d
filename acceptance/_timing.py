"""The benchmarks' shared timing loop and statistics (acceptance/bench_*.py).

:func:`interleaved` times every subject once per round, in an order that changes from round to round
(``alternate``: reversed every other round; ``rotate``: each round starts one subject later), after untimed
warm-up passes, so that drift on a shared machine hits every subject alike and no subject always follows the
same other one. :func:`timed` times one call; :func:`p95` is the nearest-rank 95th percentile; :func:`rss_kb`
reads a process's resident set."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["Aim", "Call", "interleaved", "p95", "rss_kb", "timed"]

Call = Callable[[], Awaitable[object]]


@dataclass
class Aim:
    """An aim of an issue, as a benchmark reports it (printed, not asserted)."""

    what: str
    target: str
    measured: str
    met: bool


async def timed(call: Call) -> float:
    """Seconds ``call`` took."""
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def interleaved(
    subjects: Mapping[str, Call],
    rounds: int,
    *,
    warmup: int = 0,
    order: Literal["alternate", "rotate"] = "alternate",
    timer: Callable[[Call], Awaitable[float]] = timed,
) -> dict[str, list[float]]:
    """``rounds`` timed calls of each subject (seconds, by ``timer``), after ``warmup`` untimed passes."""
    items = list(subjects.items())
    for _ in range(warmup):
        for _, call in items:
            await call()
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    for index in range(rounds):
        if order == "alternate":
            ordered = items if index % 2 == 0 else items[::-1]
        else:
            shift = index % len(items) if items else 0
            ordered = items[shift:] + items[:shift]
        for name, call in ordered:
            samples[name].append(await timer(call))
    return samples


def p95(samples: list[float]) -> float:
    """The nearest-rank 95th percentile (the largest sample for fewer than 20)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def rss_kb(pid: int) -> int | None:
    """``pid``'s resident set in KiB, None when it cannot be read (gone, or not ours to read)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
