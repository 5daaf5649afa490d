"""The wire layer of tasks: run one task program on the target (``RemoteOps.run``, program on stdin) and turn
its answer into a typed value. No state lives here; :mod:`remoteops.tasks.manager` folds the answers into
records."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass

from remoteops._programs import run_program
from remoteops._runner import Runner
from remoteops.tasks.errors import (
    TaskCapabilityMissing,
    TaskConflict,
    TaskRemoteError,
)
from remoteops.tasks.models import (
    TaskRecord,
    TaskStream,
)
from remoteops.tasks.scripts import CANCEL_SCRIPT, PURGE_SCRIPT, READ_SCRIPT, WAIT_SCRIPT

__all__ = ["Cancelled", "Chunk", "Seen", "Spill", "Started", "TaskWire"]

_START_LIMIT_S = 30.0
_LIMIT_S = 30.0
_LOCAL_GRACE_S = 15.0  # beyond the remote limit, for ssh itself


@dataclass(frozen=True)
class Started:
    mode: str
    sup_pid: int
    sup_start: str
    session: str | None
    remote_dir: str | None


@dataclass(frozen=True)
class Seen:
    """One look at a task on the target. ``outcome``: exited | matched | still_running | lost | gone (the
    task directory is missing) | running (from read/cancel: neither exited nor lost)."""

    outcome: str
    exit_code: int | None = None
    combined: int = 0
    since: int | None = None
    sup_pid: int | None = None
    sup_start: str | None = None
    matched: str | None = None
    spill: Spill | None = None


@dataclass(frozen=True)
class Spill:
    """The task's output on the target: the size of each stream, the cap per stream, what was dropped after
    it, and ``disk``: the bytes its files take (combined and its index; a task started before output was
    stored once also has a file per stream)."""

    combined: int
    stdout: int
    stderr: int
    cap: int | None  # None: a task started before there was a cap (unbounded)
    dropped_stdout: int
    dropped_stderr: int
    disk: int

    def truncated(self, stream: str) -> bool:
        """``stream`` reached the cap: what the task printed to it after that was discarded."""
        if self.cap is None:
            return False
        out = self.stdout >= self.cap or self.dropped_stdout > 0
        err = self.stderr >= self.cap or self.dropped_stderr > 0
        return {"stdout": out, "stderr": err}.get(stream, out or err)

    def dropped(self, stream: str) -> int:
        return {"stdout": self.dropped_stdout, "stderr": self.dropped_stderr}.get(
            stream, self.dropped_stdout + self.dropped_stderr
        )


def _spill(fields: Sequence[str]) -> Spill | None:
    """From ``combined stdout stderr cap dropped_stdout dropped_stderr disk`` (fields of the programs)."""
    values = [_int(x) for x in fields]
    zc, zo, ze, cap, xo, xe, zd = values
    if zc is None or zo is None or ze is None or xo is None or xe is None or zd is None:
        return None
    return Spill(zc, zo, ze, cap, xo, xe, zd)


@dataclass(frozen=True)
class Chunk:
    seen: Seen
    size: int
    start: int
    data: bytes


@dataclass(frozen=True)
class Cancelled:
    step: str  # none | INT | TERM | KILL | not_confirmed
    removed: bool
    seen: Seen


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


class TaskWire:
    def __init__(self, ops: Runner, remote_dir: str, *, ceiling_s: float) -> None:
        self._ops = ops
        self._root = remote_dir.rstrip("/") or "/"
        self._ceiling_s = ceiling_s

    def directory(self, record: TaskRecord) -> str:
        return record.remote_dir or f"{self._root}/{record.id}"

    def _identity(self, record: TaskRecord) -> list[str]:
        pid = str(record.sup_pid) if record.sup_pid is not None else "-"
        return [self.directory(record), record.exit_hash, pid, record.sup_start or "-"]

    def _bad(self, record: TaskRecord, stage: str) -> TaskRemoteError:
        return TaskRemoteError(
            f"unexpected answer from the {stage} program",
            target=record.target,
            task_id=record.id,
            stage=stage,
        )

    async def _run(
        self, target: str, task_id: str | None, script: str, args: Sequence[str], limit: float
    ) -> str:
        limit = min(limit, self._ceiling_s)  # the operator's exec ceiling holds for these programs too
        argv = ["sh", "-s", "--", *args]
        result = await run_program(self._ops, target, argv, script, limit_s=limit, grace_s=_LOCAL_GRACE_S)
        if result.exit_code != 0:
            raise TaskRemoteError(
                f"task program exited {result.exit_code}: {result.stderr.strip()[-400:]}",
                target=target,
                task_id=task_id,
                stage="remote",
            )
        return result.stdout

    async def start(self, record: TaskRecord, script: str) -> Started:
        """Run the starter. Transport errors propagate unchanged (the caller decides what they mean)."""
        result = await self._ops.run(
            record.target, ["sh", "-s"], stdin=script.encode(), timeout_s=min(_START_LIMIT_S, self._ceiling_s)
        )
        lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        ok = lines.get("ROGOK", "").split()
        if result.exit_code != 0 or len(ok) != 3 or not ok[1].isdigit():
            reason, _, detail = lines.get("ROGERR", "error ").partition(" ")
            message = detail or result.stderr.strip()[-400:] or f"start exited {result.exit_code}"
            if reason == "missing":
                raise TaskCapabilityMissing(
                    f"the target lacks {detail}", target=record.target, task_id=record.id, tool=detail
                )
            raise TaskRemoteError(
                f"{reason}: {message}", target=record.target, task_id=record.id, stage="start"
            )
        session = lines.get("ROGSESS", "-").strip()
        return Started(
            mode=ok[0],
            sup_pid=int(ok[1]),
            sup_start=ok[2],
            session=None if session in ("", "-") else session,
            remote_dir=lines.get("ROGDIR") or None,
        )

    async def look(
        self, record: TaskRecord, *, bound_s: float, grow_s: float, since: int | None, pattern: str | None
    ) -> Seen:
        """Block on the target for at most ``bound_s`` (0: one look) until exit, match or growth."""
        args = [
            *self._identity(record),
            str(max(0, int(bound_s * 100))),
            str(max(0, int(grow_s * 100))),
            "-" if since is None else str(since),
            pattern or "",
        ]
        out = await self._run(record.target, record.id, WAIT_SCRIPT, args, bound_s + _LIMIT_S)
        fields: list[str] | None = None
        matched: str | None = None
        for line in out.splitlines():
            if line.startswith("ROGWAIT "):
                fields = line.split()[1:]
            elif line.startswith("ROGMATCH "):
                try:
                    matched = base64.b64decode(line.split(" ", 1)[1], validate=True).decode(errors="replace")
                except (binascii.Error, ValueError, IndexError):
                    matched = ""
        if fields == ["gone"]:
            return Seen("gone")
        if fields is None or len(fields) != 12:
            raise self._bad(record, "wait")
        return Seen(
            spill=_spill([fields[2], fields[3], fields[4], *fields[8:12]]),
            outcome=fields[0],
            exit_code=_int(fields[1]),
            combined=int(fields[2]),
            since=_int(fields[5]),
            sup_pid=_int(fields[6]),
            sup_start=None if fields[7] == "-" else fields[7],
            matched=matched,
        )

    async def read(
        self, record: TaskRecord, *, stream: TaskStream, since: int, limit: int, tail: bool
    ) -> Chunk:
        args = [*self._identity(record), stream, str(since), str(limit), "1" if tail else "0"]
        out = await self._run(record.target, record.id, READ_SCRIPT, args, _LIMIT_S)
        head, _, body = out.partition("\n")
        fields = head.split()[1:]
        if fields[:1] == ["gone"]:
            raise TaskConflict(
                "the task directory is gone on the target",
                target=record.target,
                task_id=record.id,
                state=record.state,
            )
        if fields[:1] == ["cursor"]:
            raise TaskConflict(
                f"since is beyond the end of {stream} ({fields[1]} bytes)",
                target=record.target,
                task_id=record.id,
                state=record.state,
            )
        if fields[:1] != ["ok"] or len(fields) != 12:
            raise self._bad(record, "read")
        state, code, size, start = fields[1], _int(fields[2]), int(fields[3]), int(fields[4])
        spill = _spill(fields[5:12])
        try:
            data = base64.b64decode("".join(body.split()), validate=True)
        except (binascii.Error, ValueError):
            raise self._bad(record, "read") from None
        combined = spill.combined if spill is not None else size
        seen = Seen(state, exit_code=code, combined=combined, spill=spill)
        return Chunk(seen=seen, size=size, start=start, data=data)

    async def cancel(self, record: TaskRecord, *, grace_s: float) -> Cancelled:
        grace = str(int(grace_s * 100))
        args = [self.directory(record), record.marker, grace, grace, grace, *self._identity(record)[1:]]
        out = await self._run(record.target, record.id, CANCEL_SCRIPT, args, grace_s * 3 + 20)
        fields = next((ln.split()[1:] for ln in out.splitlines() if ln.startswith("ROGCANCEL ")), None)
        if fields == ["gone"]:
            return Cancelled("none", True, Seen("gone"))
        if fields is None or len(fields) != 11:
            raise self._bad(record, "cancel")
        seen = Seen(fields[2], exit_code=_int(fields[3]), combined=int(fields[4]), spill=_spill(fields[4:11]))
        return Cancelled(step=fields[0], removed=fields[1] == "yes", seen=seen)

    async def purge(self, target: str, task_ids: Sequence[str]) -> set[str]:
        """Remove task directories under the configured root; the IDs confirmed removed (or absent)."""
        out = await self._run(target, None, PURGE_SCRIPT, [self._root, *task_ids], _LIMIT_S)
        return {ln.split()[1] for ln in out.splitlines() if ln.startswith("ROGPURGED ")}
