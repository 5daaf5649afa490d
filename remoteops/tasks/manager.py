"""Long-running remote tasks: start detached, read output by byte offset, wait on the target, cancel, recover.

Built only on the public :meth:`RemoteOps.run` (every task program travels on stdin, see
``remoteops.tasks.scripts``) and the :class:`StateStore` (``<state_dir>/tasks/<id>.json``)::

    async with RemoteTasks(ops, store, TaskSettings(), transport) as tasks:
        info = await tasks.start("web", ["make", "-j8"], cwd="/src")
        result = await tasks.wait(info.id, timeout_s=60, pattern="error|done")
        chunk = await tasks.output(info.id, since=0)

* The record is written (``starting``) before anything runs and updated (``running``) before ``start``
  returns; a start that may have run but did not answer stays ``starting`` and is reconciled from the target.
* Waits block **on the target** (a bounded sh loop asleep in a read of a wake-up FIFO the supervisor writes
  after the exit file, re-checking every 0.25 s; ``RemoteOps.run`` per segment), never in a gateway sleep
  loop; between segments the caller's progress callback gets the output size.
* Recovery (at startup, and whenever a task is looked at) only ever *inspects* the recorded remote session:
  supervisor alive with its recorded pid and start time → running; exit file present → exited; neither →
  lost. Nothing is ever started twice (``mkdir`` of the task directory is the once-only guard).
"""

from __future__ import annotations

import base64
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

from remoteops._errors import (
    AuthError,
    ConnectError,
    HostKeyError,
    InvalidRequest,
    PolicyDenied,
    RemoteOpsError,
    RemoteShellError,
    UnknownTarget,
)
from remoteops._programs import base64_read_cap, decode_text_prefix, recover
from remoteops._runner import Runner
from remoteops._settings import TransportSettings
from remoteops._state import Collection, StateStore
from remoteops.requests import check_pattern_line, check_time_limit
from remoteops.tasks.errors import (
    TaskConflict,
    TaskError,
    TaskNotFound,
)
from remoteops.tasks.models import (
    FINISHED,
    TASK_ID_PATTERN,
    CancelStep,
    TaskCancelResult,
    TaskHealth,
    TaskInfo,
    TaskOutput,
    TaskRecord,
    TaskSettings,
    TaskState,
    TaskStream,
    TaskWaitResult,
    WaitOutcome,
)
from remoteops.tasks.scripts import command_file, new_nonce, start_script
from remoteops.tasks.upkeep import checked_command, expired, retention_loop
from remoteops.tasks.wire import Seen, TaskWire

__all__ = ["TASKS", "RemoteTasks"]

TASKS: Collection[TaskRecord] = Collection("tasks", TaskRecord, version=1)
TASK_ID = re.compile(TASK_ID_PATTERN)
ProgressFn = Callable[[int], Awaitable[None]]

_SIGNALS = {int(s): s.name for s in _signal.Signals}
_SIGNALLED = ("INT", "TERM", "KILL")
# failures of the start call after which nothing can be running on the target
_NOTHING_RAN = (
    ConnectError,
    HostKeyError,
    AuthError,
    UnknownTarget,
    PolicyDenied,
    RemoteShellError,
    TaskError,
)
_log = structlog.get_logger("remoteops.tasks")


def _signal_of(code: int | None) -> str | None:
    return _SIGNALS.get(code - 128) if code is not None and code > 128 else None


class RemoteTasks:
    """Tasks on the configured targets of ``ops``, recorded in ``store``. An async context manager."""

    def __init__(
        self,
        ops: Runner,
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
        self._read_cap = base64_read_cap(transport.output_cap_bytes)
        self._wait_slots_n = max(1, transport.max_channels_per_target // 2)
        self._ceiling_s = transport.exec_timeout_max_s
        self._wire = TaskWire(ops, settings.remote_dir, ceiling_s=transport.exec_timeout_max_s)
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

    def target_of(self, task_id: str) -> str:
        """The target a known task runs on, from its record (nothing is asked of the target)."""
        return self._get(task_id).target

    def _lock(self, task_id: str) -> anyio.Lock:
        return self._locks.setdefault(task_id, anyio.Lock())

    async def _save(self, record: TaskRecord) -> TaskRecord:
        with anyio.CancelScope(shield=True):  # a cancelled caller must not leave memory and disk apart
            await self._store.put(TASKS, record.id, record)
        self._records[record.id] = record
        return record

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
        words, env = checked_command(argv, shell, cwd, env, target=target)
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
            cap=self._settings.stream_cap_bytes,
        )
        del nonce
        try:
            started = await self._wire.start(record, script)
        except _NOTHING_RAN as exc:
            await self._save(record.model_copy(update=self._failed(f"{type(exc).__name__}: {exc.detail}")))
            raise  # nothing ran (or the starter refused before starting anything)
        # TransportLost / CommandTimeout propagate: it may have started; the record stays "starting" and
        # is reconciled from the task directory on the next look
        record = record.model_copy(
            update={
                "state": "running",
                "mode": started.mode,
                "sup_pid": started.sup_pid,
                "sup_start": started.sup_start,
                "session": started.session,
                "remote_dir": started.remote_dir,
                "started_at": self._clock(),
            }
        )
        await self._save(record)
        _log.info("task_started", task=record.id, target=target, mode=record.mode)
        return TaskInfo.of(record)

    def _failed(self, error: str) -> dict[str, Any]:
        return {"state": "failed", "error": error[:600], "finished_at": self._clock()}

    # -- folding what the target says into the record ------------------------------------------------------
    async def _apply(self, record: TaskRecord, seen: Seen) -> TaskRecord:
        """Fold one look at the target into the record (under the task's lock); return the new record."""
        async with self._lock(record.id):
            current = self._records.get(record.id, record)
            update: dict[str, Any] = {}
            if seen.outcome == "gone":
                if current.state not in FINISHED:
                    update = {
                        "state": "lost",
                        "finished_at": self._clock(),
                        "error": "the task directory is missing on the target",
                    }
            else:
                update["output_bytes"] = seen.combined
                if seen.spill is not None:
                    update.update(
                        output_cap_bytes=seen.spill.cap,
                        output_disk_bytes=seen.spill.disk,
                        output_truncated=seen.spill.truncated("combined"),
                        dropped_stdout_bytes=seen.spill.dropped_stdout,
                        dropped_stderr_bytes=seen.spill.dropped_stderr,
                    )
                if current.sup_pid is None and seen.sup_pid is not None:
                    update.update(sup_pid=seen.sup_pid, sup_start=seen.sup_start)
                if seen.outcome == "exited" and current.state not in FINISHED and seen.exit_code is not None:
                    update.update(
                        state="cancelled" if current.cancel_step in _SIGNALLED else "exited",
                        exit_code=seen.exit_code,
                        signal=_signal_of(seen.exit_code),
                        finished_at=self._clock(),
                    )
                elif seen.outcome == "lost" and current.state not in FINISHED:
                    update.update(
                        state="lost", finished_at=self._clock(), error="supervisor gone, no exit file"
                    )
                elif seen.outcome in ("still_running", "matched", "running") and current.state == "starting":
                    update.update(state="running", started_at=current.started_at or self._clock())
            new = current.model_copy(update=update)
            return await self._save(new) if new != current else current

    async def _check(self, record: TaskRecord) -> TaskRecord:
        """One non-blocking look at the task on the target."""
        seen = await self._wire.look(record, bound_s=0, grow_s=0, since=None, pattern=None)
        return await self._apply(record, seen)

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
        wanted = s.wait_default_s if timeout_s is None else timeout_s
        bound = check_time_limit(wanted, s.wait_max_s, zero_ok=True, target=record.target)
        if pattern is not None:
            check_pattern_line(pattern, target=record.target)
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
        slots = self._wait_slots.setdefault(record.target, anyio.Semaphore(self._wait_slots_n))
        # a segment's remote program runs under the operator's exec ceiling (with room for its own start)
        segment_max = max(0.5, min(s.wait_segment_s, self._ceiling_s - 5))
        while True:
            if record.state in ("exited", "cancelled"):
                return result(record, "exited")
            if record.state == "lost":
                return result(record, "lost")
            segment = min(segment_max, max(0.0, bound - (time.monotonic() - started)))
            async with slots:
                seen = await self._wire.look(
                    record, bound_s=segment, grow_s=s.progress_interval_s, since=since, pattern=pattern
                )
            record = await self._apply(record, seen)
            if seen.outcome == "matched":
                return result(record, "matched", seen.matched)
            if seen.outcome == "still_running":
                since = seen.since  # "new output" stays relative to where the first segment began
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
        if limit < (4 if encoding == "text" else 1):
            raise InvalidRequest(
                target=record.target, field="max_bytes", reason="must be >= 4 for text (>= 1 for base64)"
            )
        if since is not None and since < 0:
            raise InvalidRequest(target=record.target, field="since", reason="must be >= 0")
        chunk = await self._wire.read(record, stream=stream, since=since or 0, limit=limit, tail=tail)
        start, size, data = chunk.start, chunk.size, chunk.data
        if chunk.seen.outcome in ("exited", "lost") and record.state not in FINISHED:
            record = await self._apply(
                record,
                chunk.seen
                if stream == "combined" or chunk.seen.spill is not None
                else Seen(chunk.seen.outcome, exit_code=chunk.seen.exit_code, combined=record.output_bytes),
            )
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
            # more: bytes beyond what was read — not only the held-back start of a character still arriving
            more=end < size and start + len(data) < size,
            state=record.state,
            exit_code=record.exit_code,
            complete=finished and end >= size,
            truncated=chunk.seen.spill.truncated(stream) if chunk.seen.spill is not None else False,
            dropped_bytes=chunk.seen.spill.dropped(stream) if chunk.seen.spill is not None else 0,
            disk_bytes=chunk.seen.spill.disk if chunk.seen.spill is not None else 0,
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
        done = await self._wire.cancel(record, grace_s=self._settings.cancel_grace_s)
        if done.seen.outcome == "gone":
            record = await self._apply(record, done.seen)
            return TaskCancelResult(
                id=task_id,
                step="already_exited",
                state=record.state,
                exit_code=record.exit_code,
                signal=record.signal,
                session_removed=True,
            )
        step: CancelStep = "already_exited" if done.step == "none" else done.step  # type: ignore[assignment]
        async with self._lock(task_id):
            current = self._records[task_id]
            if step != "already_exited" or current.cancel_step is None:
                update: dict[str, Any] = {"cancel_step": step}
                if current.state == "exited" and step in _SIGNALLED:
                    update["state"] = "cancelled"
                await self._save(current.model_copy(update=update))
        seen = done.seen
        if seen.outcome == "lost" and step in _SIGNALLED:
            seen = Seen(
                "running", combined=seen.combined, spill=seen.spill
            )  # no exit file, but we ended it: cancelled below
        record = await self._apply(self._records[task_id], seen)
        if step in _SIGNALLED and record.state not in FINISHED:
            # every process confirmed gone but no exit file (the supervisor was killed): cancelled anyway
            async with self._lock(task_id):
                update = {"state": "cancelled", "finished_at": self._clock()}
                record = await self._save(self._records[task_id].model_copy(update=update))
        return TaskCancelResult(
            id=task_id,
            step=step,
            state=record.state,
            exit_code=record.exit_code,
            signal=record.signal,
            session_removed=done.removed or step == "already_exited",
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
        await recover(pending, self._check, self._reconciling)

    async def purge_expired(self) -> list[str]:
        """Remove remote directories and records of tasks finished longer than ``retention_s`` ago."""
        purged: list[str] = []
        for target, records in expired(
            self._records.values(), self._settings.retention_s, self._clock()
        ).items():
            try:
                self._ops.target(target)
                done = await self._wire.purge(target, [r.id for r in records])
            except (RemoteOpsError, TimeoutError) as exc:
                _log.warning("task_purge_failed", target=target, error=type(exc).__name__)
                continue
            for record in records:
                if record.id in done:
                    await self._store.delete(TASKS, record.id)
                    self._records.pop(record.id, None)
                    self._locks.pop(record.id, None)
                    purged.append(record.id)
        return purged

    async def _retention_loop(self) -> None:
        await retention_loop(self.purge_expired, self._settings.retention_check_s)
