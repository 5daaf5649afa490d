"""Identical-output groups: 200 identical answers read as one group naming its 200 targets."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

from remoteops._models import ExecResult

__all__ = ["exec_succeeded", "group_identical"]

K = TypeVar("K", bound=Hashable)


def group_identical(items: Iterable[tuple[str, K]]) -> list[tuple[K, list[str]]]:
    """``(target, key)`` pairs grouped by key: largest group first, then in order of first appearance;
    each group's targets in the order given."""
    groups: dict[K, list[str]] = {}
    for target, key in items:
        groups.setdefault(key, []).append(target)
    order = {key: index for index, key in enumerate(groups)}
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), order[kv[0]]))


def exec_succeeded(result: ExecResult) -> bool:
    """A command of a fleet run counts as a success when it exited 0 within its time limit."""
    return result.exit_code == 0 and not result.timed_out
