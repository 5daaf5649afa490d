"""Fleet settings, selectors, the batching plan and the per-target records of one fleet run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from remoteops._settings import LabelKey, LabelValue
from remoteops.requests import RequestModel

__all__ = [
    "Count",
    "FleetPlan",
    "FleetRun",
    "FleetSettings",
    "GroupMember",
    "LabelMatch",
    "Outcome",
    "Selector",
    "SkipReason",
    "TargetRecord",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

T = TypeVar("T")

Count = int | str
"""A number of targets (``2``) or a percentage of the selected targets (``"25%"``)."""

Outcome = Literal["succeeded", "failed", "error", "skipped", "denied", "cancelled"]
"""``succeeded``/``failed``: the job ran and the caller's predicate judged its value; ``error``: the job
raised (transport, time limit, ...); ``skipped``: never started (``reason``); ``denied``: refused by policy
before anything connected; ``cancelled``: running when the run was cancelled, stopped."""

SkipReason = Literal["canary_failed", "failure_budget", "cancelled", "overall_timeout"]


class FleetSettings(BaseModel):
    """``[fleet]``: defaults and ceilings of fleet operations (``exec_many``, ``upload_many``)."""

    model_config = _FROZEN

    forks: int = Field(default=16, ge=1, le=1024)
    """Targets in flight at once when a call does not say."""
    max_forks: int = Field(default=64, ge=1, le=1024)
    """The ceiling of a call's ``forks``."""
    max_targets: int = Field(default=1000, ge=1, le=100_000)
    """A selector matching more targets than this is refused (``validation_error``)."""
    output_cap_bytes: int = Field(default=4096, ge=256, le=1024 * 1024)
    """Default per-target stdout/stderr kept in an ``exec_many`` result (head and tail)."""

    @model_validator(mode="after")
    def _forks_within_ceiling(self) -> FleetSettings:
        if self.forks > self.max_forks:
            raise ValueError("fleet.forks must not exceed fleet.max_forks")
        return self


class LabelMatch(BaseModel):
    """A label selector: every label given must be on the target with that value."""

    model_config = _FROZEN

    labels: dict[LabelKey, LabelValue] = Field(min_length=1, max_length=32)


GroupMember = str | LabelMatch
"""A member of a configured group: a target name, or ``{labels = {...}}`` (every target matching)."""


class Selector(RequestModel):
    """Which targets: every criterion given must hold (a group, labels, an explicit list); at least one."""

    group: str | None = Field(None, min_length=1, max_length=128, description="A configured group name.")
    labels: dict[str, str] | None = Field(
        None, description="Labels every selected target carries with these values."
    )
    targets: list[str] | None = Field(
        None, min_length=1, max_length=10_000, description="Explicit target names (their order is kept)."
    )

    @model_validator(mode="after")
    def _something(self) -> Selector:
        if self.group is None and not self.labels and self.targets is None:
            raise ValueError("give at least one of group, labels or targets")
        return self


def _count(value: Count | None, name: str, *, zero_ok: bool) -> Count | None:
    if value is None or isinstance(value, bool):
        if isinstance(value, bool):
            raise ValueError(f"{name} is a count or a percentage such as '25%'")
        return value
    if isinstance(value, int):
        if value < (0 if zero_ok else 1):
            raise ValueError(f"{name} must be {'>= 0' if zero_ok else '>= 1'}")
        return value
    text = value.strip()
    if not text.endswith("%"):
        raise ValueError(f"{name} is a count or a percentage such as '25%'")
    try:
        pct = float(text[:-1])
    except ValueError:
        raise ValueError(f"{name} is a count or a percentage such as '25%'") from None
    low_ok = pct >= 0 if zero_ok else pct > 0
    if not (low_ok and pct <= 100):  # NaN fails both
        raise ValueError(f"{name} percentage must be in {'[0' if zero_ok else '(0'}, 100]")
    return text


class FleetPlan(BaseModel):
    """How a fleet run proceeds (``remoteops.fleet.plan`` turns it into batches)."""

    model_config = _FROZEN

    forks: int = Field(16, ge=1)
    serial: Count | None = None
    canary: int = Field(0, ge=0)
    max_failures: Count | None = None

    @field_validator("serial")
    @classmethod
    def _serial(cls, value: Count | None) -> Count | None:
        return _count(value, "serial", zero_ok=False)

    @field_validator("max_failures")
    @classmethod
    def _max_failures(cls, value: Count | None) -> Count | None:
        return _count(value, "max_failures", zero_ok=True)


@dataclass
class TargetRecord(Generic[T]):
    """What happened on one target. ``value`` is the job's result (``succeeded``/``failed``), ``error``
    what it raised (``error``, ``denied``); ``batch`` is 0 for the canary (when there is one)."""

    target: str
    outcome: Outcome
    batch: int | None = None
    value: T | None = None
    error: Exception | None = None
    reason: str | None = None
    started_s: float | None = None  # since the run began
    duration_s: float | None = None


@dataclass
class FleetRun(Generic[T]):
    """Every selected target's record, in selection order (denied ones first), and the run's facts."""

    records: list[TargetRecord[T]] = field(default_factory=list)
    batches: int = 0
    wall_s: float = 0.0
    max_in_flight: int = 0
    stopped: SkipReason | None = None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for record in self.records:
            out[record.outcome] = out.get(record.outcome, 0) + 1
        return out
