"""The phase registry: every acceptance phase is one ``@phase`` function, or one ``not_built`` line.

Adding a phase when a capability lands is local: write ``acceptance/phases/<name>.py`` with a function

    @phase("files", "file read/write/edit over the transport", needs=("sshd",))
    async def files(ctx: PhaseContext) -> None:
        ...  # ctx.env (shared peers), ctx.figures (what the report shows), ctx.check(...), ctx.created(...)

import it in ``acceptance/phases/__init__.py`` and delete its ``not_built`` line there. A phase reports
figures, fails through ``ctx.check`` (a named condition, kept in the report), skips only through
``ctx.skip(reason)``, and registers with ``ctx.created(what, gone)`` each thing it makes so the runner can
verify after the phase that it is gone.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from acceptance._env import Env

__all__ = [
    "REGISTRY",
    "Phase",
    "PhaseContext",
    "PhaseFailed",
    "PhaseSkipped",
    "not_built",
    "phase",
    "pid_gone",
]

T = TypeVar("T")
PhaseFn = Callable[["PhaseContext"], Awaitable[None]]


class PhaseFailed(Exception):
    """A named check of a phase did not hold."""


class PhaseSkipped(Exception):
    """The phase cannot run here; the message is the reason shown in the report."""


@dataclass(frozen=True)
class Phase:
    name: str
    title: str
    run: PhaseFn | None
    """None: the capability has not landed (``not_built``)."""
    needs: tuple[str, ...] = ()
    """Peers of the run environment the phase needs (``sshd``, ``upstream``); missing → skipped."""
    reason: str | None = None
    prepare: PhaseFn | None = None
    """Runs before the phase's ceiling starts, bounded by its own limits (e.g. installing pinned npm tools
    on a fresh machine); what it prepares goes into ``ctx.state``."""


REGISTRY: list[Phase] = []


def _register(entry: Phase) -> None:
    if any(existing.name == entry.name for existing in REGISTRY):
        raise ValueError(f"acceptance phase {entry.name!r} registered twice")
    REGISTRY.append(entry)


def phase(
    name: str, title: str, *, needs: tuple[str, ...] = (), prepare: PhaseFn | None = None
) -> Callable[[PhaseFn], PhaseFn]:
    """Register an implemented phase (in import order)."""

    def register(fn: PhaseFn) -> PhaseFn:
        _register(Phase(name, title, fn, needs, prepare=prepare))
        return fn

    return register


def not_built(name: str, title: str, capability: str) -> None:
    """Register a phase whose capability has not landed: reported ``not_built``, never passed."""
    _register(Phase(name, title, None, reason=f"not built yet: {capability}"))


def pid_gone(pid: int) -> bool:
    """True when no process (zombies included) has this pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass
class PhaseContext:
    env: Env
    quick: bool
    figures: dict[str, Any] = field(default_factory=dict)
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    """Closed by the runner after the phase, before the cleanup checks."""
    gone_checks: list[tuple[str, Callable[[], bool]]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    """What the phase's ``prepare`` step handed to the phase."""

    def n(self, quick: T, full: T) -> T:
        """A size for this mode: small in ``--quick``, full otherwise."""
        return quick if self.quick else full

    def check(self, condition: bool, what: str) -> None:
        """Fail the phase with ``what`` unless ``condition`` holds."""
        if not condition:
            raise PhaseFailed(what)

    def fail(self, what: str) -> NoReturn:
        raise PhaseFailed(what)

    def skip(self, reason: str) -> NoReturn:
        raise PhaseSkipped(reason)

    def created(self, what: str, gone: Callable[[], bool]) -> None:
        """Something this phase made; after the phase ``gone()`` must be true (reported in ``cleanup``)."""
        self.gone_checks.append((what, gone))
