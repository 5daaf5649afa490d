"""systemd on a target: unit status, lists, dependencies, actions and ``daemon-reload``.

``ops.systemd.status("web", ["nginx.service"])``. Every unit name passes the grammar of
:mod:`remoteops.systemd.names` before anything runs. States come from ``systemctl show -p …`` (key=value,
never the human ``status`` text) and lists from ``list-units --output=json`` (or, where the target's
systemctl has no JSON output, the columns of ``--plain --no-legend``; the result's ``source`` says which).
An action returns the unit's state before and after, waiting (bounded) for it to leave activating /
deactivating / reloading, and the job's result. Privilege: :mod:`remoteops.systemd.runner`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Literal

import anyio

from remoteops._errors import InvalidRequest
from remoteops._models import ExecResult
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode, PrivilegeReport
from remoteops.systemd.errors import SystemdCommandFailed, SystemdMissing, UnitNotFound
from remoteops.systemd.journal import read_journal
from remoteops.systemd.models import (
    JournalPage,
    UnitAction,
    UnitActionResult,
    UnitDependencies,
    UnitList,
    UnitListEntry,
    UnitStatus,
)
from remoteops.systemd.names import UNIT_TYPES, check_unit, is_unit_name
from remoteops.systemd.runner import SystemdRunner, run_privileged
from remoteops.systemd.transaction import TransactionRequest, TransactionResult, run_transaction

__all__ = ["ACTIONS", "TRANSIENT_STATES", "RemoteSystemd", "parse_show"]

ACTIONS: tuple[str, ...] = (
    "start", "stop", "restart", "reload", "try-restart", "enable", "disable", "mask", "unmask"
)  # fmt: skip
TRANSIENT_STATES = frozenset({"activating", "deactivating", "reloading", "refreshing"})
_SYSTEMCTL = ("systemctl", "--no-pager", "--no-ask-password")
_STATUS_PROPS = (
    "Id", "Description", "LoadState", "ActiveState", "SubState", "MainPID", "Result", "ExecMainCode",
    "ExecMainStatus", "ExecMainExitTimestampMonotonic", "UnitFileState", "FragmentPath",
    "ActiveEnterTimestamp", "InactiveEnterTimestamp", "StateChangeTimestamp", "NRestarts",
)  # fmt: skip
_DEP_PROPS = {
    "Requires": "requires", "Wants": "wants", "BindsTo": "binds_to", "PartOf": "part_of",
    "Conflicts": "conflicts", "After": "after", "Before": "before", "RequiredBy": "required_by",
    "WantedBy": "wanted_by",
}  # fmt: skip
_EXIT_CODES = {"1": "exited", "2": "killed", "3": "dumped"}
_STATES = frozenset({"active", "inactive", "failed", "activating", "deactivating", "reloading"})
_MAX_UNITS = 1000

_NOT_BOOTED = "System has not been booted with systemd"
"""systemctl's fixed message on a machine whose PID 1 is not systemd (a container, another init)."""


def parse_show(text: str) -> list[dict[str, str]]:
    """``systemctl show`` output: one ``key=value`` block per unit, blocks separated by a blank line."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition("=")
        if sep:
            blocks[-1][key] = value
    return [block for block in blocks if block]


def _opt(value: str | None) -> str | None:
    return value if value not in (None, "", "n/a", "[not set]") else None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def _status(block: dict[str, str]) -> UnitStatus:
    pid = _int(block.get("MainPID"))
    exited = block.get("ExecMainExitTimestampMonotonic", "0") not in ("", "0")
    code = _EXIT_CODES.get(block.get("ExecMainCode", "")) if exited else None
    restarts = _int(block.get("NRestarts"))
    return UnitStatus(
        unit=block.get("Id", ""),
        description=_opt(block.get("Description")),
        load_state=block.get("LoadState", ""),
        active_state=block.get("ActiveState", ""),
        sub_state=block.get("SubState", ""),
        main_pid=pid or None,
        result=_opt(block.get("Result")),
        exit_code=code,
        exit_status=_int(block.get("ExecMainStatus")) if code is not None else None,
        unit_file_state=_opt(block.get("UnitFileState")),
        fragment_path=_opt(block.get("FragmentPath")),
        active_since=_opt(block.get("ActiveEnterTimestamp")),
        inactive_since=_opt(block.get("InactiveEnterTimestamp")),
        state_change=_opt(block.get("StateChangeTimestamp")),
        n_restarts=restarts,
    )


class RemoteSystemd:
    """The systemd operations of one :class:`RemoteOps` (``ops.systemd``)."""

    def __init__(self, runner: SystemdRunner, *, settle_poll_s: float = 0.2) -> None:
        self._runner = runner
        self._poll_s = settle_poll_s

    async def _systemctl(
        self,
        target: str,
        args: Sequence[str],
        *,
        unit: str | None,
        privilege: PrivilegeMode = "user",
        escalate: bool = False,
        secrets: SecretSource | None = None,
        timeout_s: float | None = None,
    ) -> tuple[ExecResult, PrivilegeReport]:
        argv = [*_SYSTEMCTL, *args]
        result, report = await run_privileged(
            self._runner, target, argv, privilege=privilege, escalate=escalate, secrets=secrets,
            timeout_s=timeout_s,
        )  # fmt: skip
        if result.exit_code == 127:
            raise SystemdMissing("systemctl is not installed", target=target, unit=unit, tool="systemctl")
        if result.exit_code != 0 and _NOT_BOOTED in result.stderr:
            raise SystemdMissing(
                "systemd is not the target's init system (systemctl: 'System has not been booted with "
                "systemd as init system')",
                target=target,
                unit=unit,
                tool="systemctl",
            )
        return result, report

    async def status(
        self,
        target: str,
        units: Sequence[str],
        *,
        privilege: PrivilegeMode = "user",
        escalate: bool = False,
        secrets: SecretSource | None = None,
    ) -> list[UnitStatus]:
        """The typed state of each unit (``UnitNotFound`` when systemd has no such unit)."""
        if not units or len(units) > 64:
            raise InvalidRequest(target=target, field="units", reason="give 1 to 64 units")
        for index, unit in enumerate(units):
            check_unit(unit, field=f"units[{index}]", target=target)
        props = f"--property={','.join(_STATUS_PROPS)}"
        result, _ = await self._systemctl(
            target, ["show", props, "--", *units], unit=units[0], privilege=privilege, escalate=escalate,
            secrets=secrets,
        )  # fmt: skip
        if result.exit_code != 0:
            raise SystemdCommandFailed(
                f"systemctl show exited {result.exit_code}: {result.stderr.strip()[-300:]}",
                target=target, unit=units[0], stage="show",
            )  # fmt: skip
        blocks = parse_show(result.stdout)
        if len(blocks) != len(units):
            raise SystemdCommandFailed(
                f"systemctl show answered {len(blocks)} blocks for {len(units)} units",
                target=target, unit=units[0], stage="show",
            )  # fmt: skip
        out = []
        for unit, block in zip(units, blocks, strict=True):
            status = _status(block)
            if status.load_state == "not-found" and status.active_state == "inactive":
                raise UnitNotFound(f"systemd has no unit {unit}", target=target, unit=unit)
            out.append(status.model_copy(update={"unit": status.unit or unit}))
        return out

    async def _state(self, target: str, unit: str) -> UnitStatus | None:
        try:
            return (await self.status(target, [unit]))[0]
        except UnitNotFound:
            return None

    async def list(
        self,
        target: str,
        *,
        unit_type: str | None = None,
        state: str | None = None,
        pattern: str | None = None,
        all_units: bool = False,
        limit: int = 200,
    ) -> UnitList:
        """Units systemd has loaded (``all_units``: inactive ones too), filtered by type, state and a glob
        pattern (a unit name, or its prefix with ``*``), at most ``limit``."""
        if not 1 <= limit <= _MAX_UNITS:
            raise InvalidRequest(target=target, field="limit", reason=f"must be in [1, {_MAX_UNITS}]")
        args = ["list-units", "--no-legend"]
        if unit_type is not None:
            if unit_type not in UNIT_TYPES:
                raise InvalidRequest(target=target, field="type", reason="not a unit type")
            args.append(f"--type={unit_type}")
        if state is not None:
            if state not in _STATES:
                raise InvalidRequest(target=target, field="state", reason="not a unit state")
            args.append(f"--state={state}")
        if all_units:
            args.append("--all")
        globs = []
        if pattern is not None:
            if not is_unit_name(pattern.replace("*", "x")) and not is_unit_name(
                pattern.replace("*", "x") + ".service"
            ):
                raise InvalidRequest(target=target, field="pattern", reason="not a unit name or glob of one")
            globs = ["--", pattern]
        result, _ = await self._systemctl(target, [*args, "--output=json", *globs], unit=None)
        source: Literal["json", "plain"] = "json"
        rows: list[UnitListEntry] = []
        parsed = None
        if result.exit_code == 0:
            try:
                parsed = json.loads(result.stdout or "[]")
            except ValueError:
                parsed = None
        if isinstance(parsed, list):
            for item in parsed:
                if isinstance(item, dict) and is_unit_name(str(item.get("unit", ""))):
                    rows.append(
                        UnitListEntry(
                            unit=str(item["unit"]),
                            load_state=str(item.get("load", "")),
                            active_state=str(item.get("active", "")),
                            sub_state=str(item.get("sub", "")),
                            description=str(item.get("description", "")),
                        )
                    )
        else:
            source = "plain"
            result, _ = await self._systemctl(target, [*args, "--plain", *globs], unit=None)
            if result.exit_code != 0:
                raise SystemdCommandFailed(
                    f"systemctl list-units exited {result.exit_code}: {result.stderr.strip()[-300:]}",
                    target=target, stage="list-units",
                )  # fmt: skip
            for line in result.stdout.splitlines():
                words = line.split(None, 4)
                if len(words) >= 4 and is_unit_name(words[0]):
                    desc = words[4] if len(words) > 4 else ""
                    rows.append(UnitListEntry(unit=words[0], load_state=words[1], active_state=words[2],
                                              sub_state=words[3], description=desc))  # fmt: skip
        return UnitList(
            target=target,
            units=rows[:limit],
            truncated=len(rows) > limit,
            source=source,
        )

    async def dependencies(self, target: str, unit: str) -> UnitDependencies:
        check_unit(unit, target=target)
        props = f"--property=Id,LoadState,ActiveState,{','.join(_DEP_PROPS)}"
        result, _ = await self._systemctl(target, ["show", props, "--", unit], unit=unit)
        if result.exit_code != 0:
            raise SystemdCommandFailed(
                f"systemctl show exited {result.exit_code}: {result.stderr.strip()[-300:]}",
                target=target, unit=unit, stage="show",
            )  # fmt: skip
        block = (parse_show(result.stdout) or [{}])[0]
        if block.get("LoadState") == "not-found" and block.get("ActiveState") == "inactive":
            raise UnitNotFound(f"systemd has no unit {unit}", target=target, unit=unit)
        lists = {
            field: sorted(name for name in block.get(prop, "").split() if is_unit_name(name))
            for prop, field in _DEP_PROPS.items()
        }
        return UnitDependencies(target=target, unit=unit, **lists)

    async def journal(
        self,
        target: str,
        *,
        unit: str | None = None,
        since: str | None = None,
        until: str | None = None,
        priority: str | int | None = None,
        grep: str | None = None,
        lines: int = 100,
        cursor: str | None = None,
        privilege: PrivilegeMode = "auto",
        escalate: bool = False,
        secrets: SecretSource | None = None,
    ) -> JournalPage:
        """Journal entries (:mod:`remoteops.systemd.journal`), continued exactly with the page's cursor."""
        return await read_journal(
            self._runner, target, unit=unit, since=since, until=until, priority=priority, grep=grep,
            lines=lines, cursor=cursor, privilege=privilege, escalate=escalate, secrets=secrets,
        )  # fmt: skip

    async def transaction(
        self, request: TransactionRequest, *, escalate: bool = False, secrets: SecretSource | None = None
    ) -> TransactionResult:
        """One reversible change with health gates and a verified rollback (:mod:`.transaction`)."""
        return await run_transaction(self._runner, self, request, escalate=escalate, secrets=secrets)

    async def _settle(self, target: str, unit: str, settle_s: float) -> tuple[UnitStatus | None, bool]:
        deadline = time.monotonic() + settle_s
        while True:
            state = await self._state(target, unit)
            if state is None or state.active_state not in TRANSIENT_STATES:
                return state, True
            if time.monotonic() >= deadline:
                return state, False
            await anyio.sleep(self._poll_s)  # polling systemd's view of the unit (bounded by settle_s)

    async def action(
        self,
        target: str,
        unit: str,
        action: UnitAction,
        *,
        privilege: PrivilegeMode = "auto",
        escalate: bool = False,
        secrets: SecretSource | None = None,
        settle_s: float = 10.0,
        timeout_s: float = 120.0,
    ) -> UnitActionResult:
        """Run ``systemctl <action> <unit>``: the states before and after (settled within ``settle_s``)."""
        check_unit(unit, target=target)
        if action not in ACTIONS:
            raise InvalidRequest(target=target, field="action", reason=f"one of {', '.join(ACTIONS)}")
        if not 0 <= settle_s <= 300:
            raise InvalidRequest(target=target, field="settle_s", reason="must be in [0, 300]")
        started = time.monotonic()
        before = await self._state(target, unit)
        if before is None and action not in ("mask", "unmask"):
            raise UnitNotFound(f"systemd has no unit {unit}", target=target, unit=unit)
        result, report = await self._systemctl(
            target, [action, "--", unit], unit=unit, privilege=privilege, escalate=escalate,
            secrets=secrets, timeout_s=timeout_s,
        )  # fmt: skip
        after, settled = await self._settle(target, unit, settle_s)
        return UnitActionResult(
            target=target,
            unit=unit,
            action=action,
            before=before,
            after=after,
            job_result="done" if result.exit_code == 0 else "failed",
            exit_code=result.exit_code,
            message=result.stderr.strip()[-600:],
            settled=settled,
            privilege=report,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )

    async def daemon_reload(
        self,
        target: str,
        *,
        unit: str | None = None,
        privilege: PrivilegeMode = "auto",
        escalate: bool = False,
        secrets: SecretSource | None = None,
        timeout_s: float = 120.0,
    ) -> UnitActionResult:
        """``systemctl daemon-reload``; with ``unit``, that unit's state before and after."""
        if unit is not None:
            check_unit(unit, target=target)
        started = time.monotonic()
        before = await self._state(target, unit) if unit is not None else None
        result, report = await self._systemctl(
            target, ["daemon-reload"], unit=unit, privilege=privilege, escalate=escalate, secrets=secrets,
            timeout_s=timeout_s,
        )  # fmt: skip
        after = await self._state(target, unit) if unit is not None else None
        return UnitActionResult(
            target=target,
            unit=unit,
            action="daemon-reload",
            before=before,
            after=after,
            job_result="done" if result.exit_code == 0 else "failed",
            exit_code=result.exit_code,
            message=result.stderr.strip()[-600:],
            settled=True,
            privilege=report,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
