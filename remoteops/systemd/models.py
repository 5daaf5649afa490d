"""Typed records of the systemd operations (units, jobs, journal pages, transactions)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from remoteops.privilege.models import PrivilegeReport

__all__ = [
    "JournalEntry",
    "JournalPage",
    "UnitAction",
    "UnitActionResult",
    "UnitDependencies",
    "UnitList",
    "UnitListEntry",
    "UnitStatus",
]

_FROZEN = ConfigDict(frozen=True)

UnitAction = Literal[
    "start", "stop", "restart", "reload", "try-restart", "enable", "disable", "mask", "unmask"
]


class UnitStatus(BaseModel):
    """``systemctl show -p …`` of one unit, typed."""

    model_config = _FROZEN

    unit: str
    description: str | None = None
    load_state: str
    """loaded | not-found | masked | bad-setting | error"""
    active_state: str
    """active | inactive | failed | activating | deactivating | reloading"""
    sub_state: str
    main_pid: int | None = None
    result: str | None = None
    """The unit's result (success, exit-code, signal, timeout, core-dump, ...)."""
    exit_code: Literal["exited", "killed", "dumped"] | None = None
    """How the main process last ended (None: it has not ended, or the unit has no main process)."""
    exit_status: int | None = None
    """Its exit status (``exited``) or signal number (``killed``, ``dumped``)."""
    unit_file_state: str | None = None
    """enabled | disabled | static | masked | ... (None: no unit file)."""
    fragment_path: str | None = None
    active_since: str | None = None
    """When the unit last entered ``active`` (systemd's own timestamp text)."""
    inactive_since: str | None = None
    state_change: str | None = None
    n_restarts: int | None = None


class UnitListEntry(BaseModel):
    model_config = _FROZEN

    unit: str
    load_state: str
    active_state: str
    sub_state: str
    description: str = ""


class UnitList(BaseModel):
    model_config = _FROZEN

    target: str
    units: list[UnitListEntry]
    truncated: bool
    """More units matched than ``limit``."""
    source: Literal["json", "plain"]
    """``json``: ``list-units --output=json``; ``plain``: the columns of ``--plain --no-legend`` (the
    target's systemctl has no JSON output)."""


class UnitDependencies(BaseModel):
    model_config = _FROZEN

    target: str
    unit: str
    requires: list[str] = Field(default_factory=list)
    wants: list[str] = Field(default_factory=list)
    binds_to: list[str] = Field(default_factory=list)
    part_of: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)
    before: list[str] = Field(default_factory=list)
    required_by: list[str] = Field(default_factory=list)
    wanted_by: list[str] = Field(default_factory=list)


class UnitActionResult(BaseModel):
    """One unit action (or ``daemon-reload``): the states before and after, the job's outcome."""

    model_config = _FROZEN

    target: str
    unit: str | None
    """None for ``daemon-reload``."""
    action: str
    before: UnitStatus | None
    after: UnitStatus | None
    job_result: Literal["done", "failed"]
    """``done``: systemctl exited 0; ``failed``: it did not (``message`` says what systemctl said)."""
    exit_code: int | None
    message: str = ""
    settled: bool
    """The unit left activating/deactivating/reloading within the settle bound."""
    privilege: PrivilegeReport
    duration_ms: float


class JournalEntry(BaseModel):
    model_config = _FROZEN

    cursor: str
    realtime_us: int | None = None
    priority: int | None = None
    unit: str | None = None
    identifier: str | None = None
    pid: int | None = None
    message: str
    """The entry's MESSAGE (binary messages: decoded as UTF-8 with replacement)."""


class JournalPage(BaseModel):
    model_config = _FROZEN

    target: str
    entries: list[JournalEntry]
    cursor: str | None
    """Pass it as ``cursor`` to continue right after the last entry (None: nothing read, no cursor given)."""
    more: bool
    """More entries matched than ``lines`` (continue with ``cursor``)."""
    privilege: PrivilegeReport
    argv: list[str] = Field(default_factory=list)
    """The journalctl command that ran (for the record; no secrets)."""
    fields: dict[str, Any] = Field(default_factory=dict)
