"""Long-running remote tasks: start detached, read output by byte offset, wait on the target, cancel, recover.

Built only on the public :meth:`RemoteOps.run` (every task program travels on stdin, see
``remoteops._task_scripts``) and the :class:`StateStore` (``<state_dir>/tasks/<id>.json``)::

    async with RemoteTasks(ops, store, TaskSettings(), transport) as tasks:
        info = await tasks.start("web", ["make", "-j8"], cwd="/src")
        result = await tasks.wait(info.id, timeout_s=60, pattern="error|done")
        chunk = await tasks.output(info.id, since=0)

* The record is written (``starting``) before anything runs and updated (``running``) before ``start``
  returns; a start that may have run but did not answer stays ``starting`` and is reconciled from the target.
* Waits block **on the target** (a bounded sh loop, ``RemoteOps.run`` per segment), never in a gateway sleep
  loop; between segments the caller's progress callback gets the output size.
* Recovery (at startup, and whenever a task is looked at) only ever *inspects* the recorded remote session:
  supervisor alive with its recorded pid and start time → running; exit file present → exited; neither →
  lost. Nothing is ever started twice (``mkdir`` of the task directory is the once-only guard).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import re
import secrets
import signal as _signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import structlog

from ._errors import AuthError, ConnectError, HostKeyError, PolicyDenied, RemoteOpsError, UnknownTarget
from ._ops import RemoteOps
from ._settings import TransportSettings
from ._state import Collection, StateStore
from ._task_models import (
    FINISHED,
    CancelStep,
    TaskCancelResult,
    TaskCapabilityMissing,
    TaskConflict,
    TaskHealth,
    TaskInfo,
    TaskNotFound,
    TaskOutput,
    TaskRecord,
    TaskRemoteError,
    TaskSettings,
    TaskState,
    TaskStream,
    TaskWaitResult,
    WaitOutcome,
)
from ._task_scripts import (
    CANCEL_SCRIPT,
    PURGE_SCRIPT,
    READ_SCRIPT,
    WAIT_SCRIPT,
    command_file,
    new_nonce,
    start_script,
)

__all__ = ["TASKS", "RemoteTasks", "decode_text_prefix"]

TASKS: Collection[TaskRecord] = Collection("tasks", TaskRecord, version=1)
TASK_ID = re.compile(r"^t-[0-9a-f]{16}$")
ProgressFn = Callable[[int], Awaitable[None]]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIGNALS = {int(s): s.name for s in _signal.Signals}
_START_LIMIT_S = 30.0
_CHECK_LIMIT_S = 30.0
_RECOVER_PARALLEL = 4
_log = structlog.get_logger("remoteops.tasks")


def decode_text_prefix(data: bytes, *, final: bool) -> tuple[str, int]:
    """Decode UTF-8, holding back an incomplete trailing character unless ``final``: (text, bytes used).
    Invalid bytes become U+FFFD and still count, so cursors never skip or repeat a byte."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=final)
    pending = len(decoder.getstate()[0])
    if pending and pending == len(data):  # nothing complete yet: give the bytes as replacement characters
        return decoder.decode(b"", final=True), len(data)
    return text, len(data) - pending


def _signal_of(code: int | None) -> str | None:
    return _SIGNALS.get(code - 128) if code is not None and code > 128 else None


class RemoteTasks:
    """Tasks on the configured targets of ``ops``, recorded in ``store``. An async context manager."""

    def __init__(
        self,
        ops: RemoteOps,
        store: StateStore,
        settings: TaskSettings,
        transport: TransportSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ops = ops
        self._store = store
        self._settings = settings
        self._clock = clock
        # base64 grows 4/3; keep the whole answer inside the carrier's output cap
        self._read_cap = max(1024, (transport.output_cap_bytes - 1024) * 3 // 4)
        self._wait_slots_n = max(1, transport.max_channels_per_target // 2)
        self._records: dict[str, TaskRecord] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._wait_slots: dict[str, anyio.Semaphore] = {}
        self._reconciling: set[str] = set()
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        await self._store.open()
        self._records = await self._store.load_all(TASKS)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._recover)
        tg.start_soon(self._retention_loop)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(exc_type, exc, tb)
        return None

    # -- records -------------------------------------------------------------------------------------------
    def _get(self, task_id: str) -> TaskRecord:
        record = self._records.get(task_id) if TASK_ID.fullmatch(task_id) else None
        if record is None:
            raise TaskNotFound(f"no task {task_id!r}", task_id=task_id)
        return record

    def _lock(self, task_id: str) -> anyio.Lock:
        return self._locks.setdefault(task_id, anyio.Lock())

    async def _save(self, record: TaskRecord) -> TaskRecord:
        with anyio.CancelScope(shield=True):  # a cancelled caller must not leave memory and disk apart
            await self._store.put(TASKS, record.id, record)
        self._records[record.id] = record
        return record

    def _dir(self, record: TaskRecord) -> str:
        return record.remote_dir or f"{self._settings.remote_dir.rstrip('/')}/{record.id}"

    async def _run(self, record: TaskRecord, script: str, args: Sequence[str], limit_s: float) -> str:
        result = await self._ops.run(
            record.target, ["sh", "-s", "--", *args], stdin=script.encode(), timeout_s=limit_s
        )
        if result.exit_code != 0:
            raise TaskRemoteError(
                f"task program exited {result.exit_code}: {result.stderr.strip()[-400:]}",
                target=record.target,
                task_id=record.id,
                stage="remote",
            )
        return result.stdout

    # -- start ---------------------------------------------------------------------------------------------
    async def start(
        self,
        target: str,
        argv: Sequence[str] | None = None,
        shell: str | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> TaskInfo:
        """Start ``argv`` (or ``sh -c shell``) detached on ``target``; returns once running and recorded."""
        self._ops.target(target)  # PolicyDenied before anything is written
        if (argv is None) == (shell is None):
            raise ValueError("give exactly one of argv or shell")
        words = ("sh", "-c", shell) if shell is not None else tuple(argv or ())
        if not words or not words[0]:
            raise ValueError("argv must be non-empty")
        env = dict(env or {})
        for name, value in env.items():
            if not _ENV_NAME.fullmatch(name) or "\0" in value:
                raise ValueError(f"invalid environment variable {name!r}")
        if any("\0" in w for w in words) or (cwd is not None and "\0" in cwd):
            raise ValueError("argv and cwd must not contain NUL")
        nonce = new_nonce()
        record = TaskRecord(
            id=f"t-{secrets.token_hex(8)}",
            target=target,
            argv=tuple(argv) if argv is not None else None,
            shell=shell,
            cwd=cwd,
            env_names=tuple(env),
            state="starting",
            exit_hash=hashlib.sha256(nonce.encode()).hexdigest(),
            marker=secrets.token_hex(12),
            created_at=self._clock(),
        )
        await self._save(record)
        script = start_script(
            task_id=record.id,
            nonce=nonce,
            root=self._settings.remote_dir,
            want=self._settings.session,
            cmd_text=command_file(words, marker=record.marker, cwd=cwd, env=env),
        )
        del nonce
        try:
            result = await self._ops.run(
                target, ["sh", "-s"], stdin=script.encode(), timeout_s=_START_LIMIT_S
            )
        except (ConnectError, HostKeyError, AuthError, UnknownTarget, PolicyDenied) as exc:
            await self._save(record.model_copy(update=self._failed(f"{type(exc).__name__}: {exc.detail}")))
            raise  # nothing ran
        # TransportLost / CommandTimeout: it may have started; the record stays "starting" and is reconciled
        lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        ok = lines.get("ROGOK", "").split()
        if result.exit_code != 0 or len(ok) != 3:
            reason, _, detail = lines.get("ROGERR", "error ").partition(" ")
            message = detail or result.stderr.strip()[-400:] or f"start exited {result.exit_code}"
            await self._save(record.model_copy(update=self._failed(f"{reason}: {message}")))
            if reason == "missing":
                raise TaskCapabilityMissing(
                    f"the target lacks {detail}", target=target, task_id=record.id, tool=detail
                )
            raise TaskRemoteError(message, target=target, task_id=record.id, stage="start")
        session = lines.get("ROGSESS", "-").strip()
        record = record.model_copy(
            update={
                "state": "running",
                "mode": ok[0],
                "sup_pid": int(ok[1]),
                "sup_start": ok[2],
                "session": None if session in ("", "-") else session,
                "remote_dir": lines.get("ROGDIR") or None,
                "started_at": self._clock(),
            }
        )
        await self._save(record)
        _log.info("task_started", task=record.id, target=target, mode=record.mode)
        return TaskInfo.of(record)

    def _failed(self, error: str) -> dict[str, Any]:
        return {"state": "failed", "error": error[:600], "finished_at": self._clock()}

    # -- the remote check / wait ---------------------------------------------------------------------------
    def _wait_args(
        self, record: TaskRecord, bound_s: float, grow_s: float, since: str, pattern: str
    ) -> list[str]:
        return [
            self._dir(record),
            record.exit_hash,
            str(record.sup_pid) if record.sup_pid is not None else "-",
            record.sup_start or "-",
            str(max(0, int(bound_s * 100))),
            str(max(0, int(grow_s * 100))),
            since,
            pattern,
        ]

    async def _apply(self, record: TaskRecord, fields: list[str]) -> TaskRecord:
        """Fold one ``ROGWAIT`` answer into the record (under the task's lock) and return the new record."""
        async with self._lock(record.id):
            current = self._records.get(record.id, record)
            update: dict[str, Any] = {}
            outcome = fields[0]
            if outcome == "gone":
                if current.state not in FINISHED:
                    update = {"state": "lost", "error": "the task directory is missing on the target"}
                    update["finished_at"] = self._clock()
            else:
                update["output_bytes"] = int(fields[2])
                if current.sup_pid is None and fields[6] != "-":
                    update.update(sup_pid=int(fields[6]), sup_start=fields[7])
                if outcome == "exited" and current.state not in FINISHED:
                    code = int(fields[1])
                    cancelled = current.cancel_step in ("INT", "TERM", "KILL")
                    update.update(
                        state="cancelled" if cancelled else "exited",
                        exit_code=code,
                        signal=_signal_of(code),
                        finished_at=self._clock(),
                    )
                elif outcome == "lost" and current.state not in FINISHED:
                    update.update(
                        state="lost", finished_at=self._clock(), error="supervisor gone, no exit file"
                    )
                elif outcome in ("still_running", "matched") and current.state == "starting":
                    update.update(state="running", started_at=current.started_at or self._clock())
            new = current.model_copy(update=update)
            return await self._save(new) if new != current else current

    async def _check(self, record: TaskRecord) -> TaskRecord:
        """One non-blocking look at the task on the target (bound 0)."""
        with anyio.fail_after(_CHECK_LIMIT_S + 15):
            out = await self._run(record, WAIT_SCRIPT, self._wait_args(record, 0, 0, "-", ""), _CHECK_LIMIT_S)
        return await self._apply(record, self._parse_wait(record, out)[0])

    def _parse_wait(self, record: TaskRecord, out: str) -> tuple[list[str], str | None]:
        fields: list[str] | None = None
        matched: str | None = None
        for line in out.splitlines():
            if line.startswith("ROGWAIT "):
                fields = line.split()[1:]
            elif line.startswith("ROGMATCH "):
                try:
                    raw = base64.b64decode(line.split(" ", 1)[1], validate=True)
                except (binascii.Error, ValueError):
                    raw = b""
                matched = raw.decode(errors="replace")
        if fields is None or (fields[0] != "gone" and len(fields) != 8):
            raise TaskRemoteError(
                "unexpected answer from the wait program",
                target=record.target,
                task_id=record.id,
                stage="wait",
            )
        return fields, matched

    async def status(self, task_id: str) -> TaskInfo:
        record = self._get(task_id)
        if record.state not in FINISHED:
            record = await self._check(record)
        return TaskInfo.of(record)

    async def wait(
        self,
        task_id: str,
        *,
        timeout_s: float | None = None,
        pattern: str | None = None,
        since: int | None = None,
        progress: ProgressFn | None = None,
    ) -> TaskWaitResult:
        """Block (on the target) until the task exits, ``pattern`` (POSIX ERE, per line) matches output after
        ``since`` (default: output that appears after the call), or ``timeout_s`` passes."""
        record = self._get(task_id)
        s = self._settings
        bound = s.wait_default_s if timeout_s is None else timeout_s
        if not 0 <= bound <= s.wait_max_s:
            raise ValueError(f"timeout_s must be in [0, {s.wait_max_s}]")
        if pattern is not None and (not pattern or "\n" in pattern or "\0" in pattern):
            raise ValueError("pattern must be one non-empty line")
        started = time.monotonic()

        def result(rec: TaskRecord, outcome: WaitOutcome, matched: str | None = None) -> TaskWaitResult:
            return TaskWaitResult(
                id=rec.id,
                outcome=outcome,
                state=rec.state,
                exit_code=rec.exit_code,
                signal=rec.signal,
                matched=matched,
                output_bytes=rec.output_bytes,
                waited_ms=round((time.monotonic() - started) * 1000, 3),
            )

        if record.state == "failed":
            raise TaskConflict(
                "the task never started", target=record.target, task_id=task_id, state="failed"
            )
        since_arg = "-" if since is None else str(since)
        slots = self._wait_slots.setdefault(record.target, anyio.Semaphore(self._wait_slots_n))
        while True:
            if record.state in ("exited", "cancelled"):
                return result(record, "exited")
            if record.state == "lost":
                return result(record, "lost")
            segment = min(s.wait_segment_s, max(0.0, bound - (time.monotonic() - started)))
            args = self._wait_args(record, segment, s.progress_interval_s, since_arg, pattern or "")
            async with slots:
                with anyio.fail_after(segment + _CHECK_LIMIT_S + 15):
                    out = await self._run(record, WAIT_SCRIPT, args, segment + _CHECK_LIMIT_S)
            fields, matched = self._parse_wait(record, out)
            record = await self._apply(record, fields)
            if fields[0] == "matched":
                return result(record, "matched", matched)
            if fields[0] == "still_running":
                since_arg = fields[5]
                if progress is not None:
                    await progress(record.output_bytes)
                if time.monotonic() - started >= bound:
                    return result(record, "still_running")

    # -- output --------------------------------------------------------------------------------------------
    async def output(
        self,
        task_id: str,
        *,
        stream: TaskStream = "combined",
        since: int | None = None,
        max_bytes: int | None = None,
        tail: bool = False,
        encoding: str = "text",
    ) -> TaskOutput:
        """Bytes of ``stream`` from ``since`` (or the last ``max_bytes`` with ``tail``); ``next_offset``
        continues exactly after them (text holds back an incomplete trailing UTF-8 character)."""
        record = self._get(task_id)
        limit = min(max_bytes or self._settings.output_max_bytes, self._read_cap)
        if limit < (4 if encoding == "text" else 1) or (since is not None and since < 0):
            raise ValueError("max_bytes must be >= 4 for text (>= 1 for base64) and since >= 0")
        args = [
            self._dir(record),
            record.exit_hash,
            str(record.sup_pid) if record.sup_pid is not None else "-",
            record.sup_start or "-",
            stream,
            str(since or 0),
            str(limit),
            "1" if tail else "0",
        ]
        with anyio.fail_after(_CHECK_LIMIT_S + 15):
            out = await self._run(record, READ_SCRIPT, args, _CHECK_LIMIT_S)
        head, _, body = out.partition("\n")
        fields = head.split()
        if fields[:2] == ["ROGREAD", "gone"]:
            raise TaskConflict(
                "the task directory is gone on the target",
                target=record.target,
                task_id=task_id,
                state=record.state,
            )
        if fields[:2] == ["ROGREAD", "cursor"]:
            raise TaskConflict(
                f"since is beyond the end of {stream} ({fields[2]} bytes)",
                target=record.target,
                task_id=task_id,
                state=record.state,
            )
        if fields[:2] != ["ROGREAD", "ok"] or len(fields) != 6:
            raise TaskRemoteError(
                "unexpected answer from the read program", target=record.target, task_id=task_id, stage="read"
            )
        state, code, size, start = fields[2], fields[3], int(fields[4]), int(fields[5])
        data = base64.b64decode("".join(body.split()))
        if state in ("exited", "lost") and record.state not in FINISHED:
            record = await self._apply(record, [state, code, str(size), "0", "0", "-", "-", "-"])
        finished = record.state in FINISHED
        if encoding == "text":
            text, used = decode_text_prefix(data, final=finished and start + len(data) >= size)
        else:
            text, used = base64.b64encode(data).decode(), len(data)
        end = start + used
        return TaskOutput(
            id=task_id,
            stream=stream,
            offset=start,
            next_offset=end,
            size=size,
            data=text,
            encoding="text" if encoding == "text" else "base64",
            returned_bytes=used,
            more=end < size,
            state=record.state,
            exit_code=record.exit_code,
            complete=finished and end >= size,
        )

    # -- cancel --------------------------------------------------------------------------------------------
    async def cancel(self, task_id: str) -> TaskCancelResult:
        """SIGINT to the task's group and marked descendants, then SIGTERM, then SIGKILL (bounded waits);
        the supervisor/tmux session is removed only once no process is left."""
        record = self._get(task_id)
        if record.state == "failed":
            raise TaskConflict(
                "the task never started", target=record.target, task_id=task_id, state="failed"
            )
        grace = str(int(self._settings.cancel_grace_s * 100))
        limit = self._settings.cancel_grace_s * 3 + 20
        args = [
            self._dir(record),
            record.marker,
            grace,
            grace,
            grace,
            record.exit_hash,
            str(record.sup_pid) if record.sup_pid is not None else "-",
            record.sup_start or "-",
        ]
        with anyio.fail_after(limit + 15):
            out = await self._run(record, CANCEL_SCRIPT, args, limit)
        fields = next((ln.split()[1:] for ln in out.splitlines() if ln.startswith("ROGCANCEL ")), None)
        if fields == ["gone"]:
            record = await self._apply(record, ["gone"])
            return TaskCancelResult(
                id=task_id,
                step="already_exited",
                state=record.state,
                exit_code=record.exit_code,
                signal=record.signal,
                session_removed=True,
            )
        if fields is None or len(fields) != 5:
            raise TaskRemoteError(
                "unexpected answer from the cancel program",
                target=record.target,
                task_id=task_id,
                stage="cancel",
            )
        step: CancelStep = "already_exited" if fields[0] == "none" else fields[0]  # type: ignore[assignment]
        async with self._lock(task_id):
            current = self._records[task_id]
            if step != "already_exited" or current.cancel_step is None:
                update: dict[str, Any] = {"cancel_step": step}
                if current.state == "exited" and step in ("INT", "TERM", "KILL"):
                    update["state"] = "cancelled"
                await self._save(current.model_copy(update=update))
        state, code, size = fields[2], fields[3], fields[4]
        if state == "lost" and step in ("INT", "TERM", "KILL"):
            state = "running"  # no exit file, but we ended it and saw every process go: cancelled below
        record = await self._apply(self._records[task_id], [state, code, size, "0", "0", "-", "-", "-"])
        if step in ("INT", "TERM", "KILL") and record.state not in FINISHED:
            # the processes are confirmed gone but no exit file appeared (supervisor killed): cancelled anyway
            async with self._lock(task_id):
                update = {"state": "cancelled", "finished_at": self._clock()}
                record = await self._save(self._records[task_id].model_copy(update=update))
        return TaskCancelResult(
            id=task_id,
            step=step,
            state=record.state,
            exit_code=record.exit_code,
            signal=record.signal,
            session_removed=fields[1] == "yes" or step == "already_exited",
        )

    # -- list, health, recovery, retention -----------------------------------------------------------------
    def list_tasks(
        self, *, target: str | None = None, state: TaskState | None = None, limit: int | None = None
    ) -> tuple[list[TaskInfo], int]:
        """Newest first, at most ``limit`` (capped by ``list_max``); also the number that matched."""
        cap = min(limit or self._settings.list_max, self._settings.list_max)
        chosen = [
            r
            for r in self._records.values()
            if (target is None or r.target == target) and (state is None or r.state == state)
        ]
        chosen.sort(key=lambda r: r.created_at, reverse=True)
        return [TaskInfo.of(r) for r in chosen[:cap]], len(chosen)

    def health(self) -> TaskHealth:
        counts: dict[str, int] = {}
        for record in self._records.values():
            counts[record.state] = counts.get(record.state, 0) + 1
        return TaskHealth(
            total=len(self._records),
            by_state=dict(sorted(counts.items())),
            remote_dir=self._settings.remote_dir,
            session=self._settings.session,
            retention_s=self._settings.retention_s,
            reconciling=len(self._reconciling),
        )

    async def _recover(self) -> None:
        """Re-attach to what was running before a restart: inspect only, never start anything."""
        pending = [r for r in self._records.values() if r.state in ("starting", "running")]
        self._reconciling = {r.id for r in pending}
        limiter = anyio.Semaphore(_RECOVER_PARALLEL)

        async def one(record: TaskRecord) -> None:
            async with limiter:
                try:
                    await self._check(record)
                except (RemoteOpsError, TimeoutError) as exc:
                    _log.warning("task_recover_failed", task=record.id, error=type(exc).__name__)
                finally:
                    self._reconciling.discard(record.id)

        async with anyio.create_task_group() as tg:
            for record in pending:
                tg.start_soon(one, record)

    async def purge_expired(self) -> list[str]:
        """Remove remote directories and records of tasks finished longer than ``retention_s`` ago."""
        now = self._clock()
        by_target: dict[str, list[TaskRecord]] = {}
        for record in self._records.values():
            if (
                record.state in FINISHED
                and (record.finished_at or record.created_at) + self._settings.retention_s <= now
            ):
                by_target.setdefault(record.target, []).append(record)
        purged: list[str] = []
        for target, records in by_target.items():
            try:
                self._ops.target(target)
                out = await self._run(
                    records[0],
                    PURGE_SCRIPT,
                    [self._settings.remote_dir, *[r.id for r in records]],
                    _CHECK_LIMIT_S,
                )
            except (RemoteOpsError, TimeoutError) as exc:
                _log.warning("task_purge_failed", target=target, error=type(exc).__name__)
                continue
            done = {ln.split()[1] for ln in out.splitlines() if ln.startswith("ROGPURGED ")}
            for record in records:
                if record.id in done:
                    await self._store.delete(TASKS, record.id)
                    self._records.pop(record.id, None)
                    self._locks.pop(record.id, None)
                    purged.append(record.id)
        return purged

    async def _retention_loop(self) -> None:
        while True:
            try:
                purged = await self.purge_expired()
                if purged:
                    _log.info("tasks_purged", count=len(purged))
            except Exception as exc:  # a bad pass must not end retention for the life of the process
                _log.warning("task_purge_error", error=type(exc).__name__)
            await anyio.sleep(self._settings.retention_check_s)
