"""Remote commands behind MCP tasks: a ``remote_exec`` as a detached remoteops task, followed to its end.

The watcher waits for the command **on the target** in bounded segments (``RemoteTasks.wait``), keeps the
status message current (bytes of output), enforces the call's ``timeout_s`` (the remote task is cancelled at
the deadline) and, once the command exited, reads stdout and stderr back into the ``ExecResult`` a direct
call returns. It keeps no state of its own: after a restart it starts again from the record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import structlog

from gateway.mcptasks.records import McpTaskRecord
from gateway.mcptasks.store import McpTaskStore
from remoteops import ExecResult, RemoteOpsError, RemoteTasks, TaskNotFound, TaskOutput

__all__ = ["Finish", "RemoteCommand", "RemoteWatcher", "failure"]

_log = structlog.get_logger("gateway.mcptasks")
_RETRY_S = 2.0
_SEGMENT_S = 20.0
_FIRST_SEGMENT_S = 2.0
"""The first wait is short, so the status message gives the output so far soon after the task began (a
wait reports growth that happens while it waits, not output that was there already)."""

Finish = Callable[..., Awaitable[McpTaskRecord | None]]
"""``finish(task_id, status, message, **record_fields)``: the runner's one way to end a task."""


@dataclass(frozen=True)
class RemoteCommand:
    """A ``remote_exec`` to run as a detached remote task."""

    target: str
    argv: list[str] | None
    shell: str | None
    cwd: str | None
    env: dict[str, str]
    timeout_s: float


class RemoteWatcher:
    def __init__(
        self, store: McpTaskStore, tasks: RemoteTasks, finish: Finish, *, output_cap_bytes: int
    ) -> None:
        self._store = store
        self._tasks = tasks
        self._finish = finish
        self._cap = output_cap_bytes

    async def watch(self, task_id: str) -> None:
        """Follow the remote command of this task until the task is terminal (also after a restart)."""
        segment_s = _FIRST_SEGMENT_S
        while True:
            record = self._store.current(task_id)
            if record is None or record.terminal or record.remote_task is None:
                return
            if record.cancel_requested:
                await self._store.changed(task_id)  # the cancel in progress finishes it
                continue
            try:
                if await self._segment(record, segment_s):
                    return
                segment_s = _SEGMENT_S
            except TaskNotFound:
                message = "the remote task record is gone (purged): the command's outcome is unknown"
                await self._finish(task_id, "completed", message, failure=failure("not_found", message))
                return
            except (RemoteOpsError, TimeoutError) as exc:  # the target is unreachable for now: try again
                _log.warning("mcp_task_watch_retry", task=task_id, error=type(exc).__name__)
                await self._store.settle(
                    task_id,
                    status_message=f"target {record.target} not reachable ({type(exc).__name__}); "
                    "the command keeps running there, checking again",
                )
                await anyio.sleep(_RETRY_S)
            except Exception as exc:  # a watcher's bug must not take the gateway down: the task says so
                _log.error("mcp_task_watch_error", task=task_id, exc_info=exc)
                message = (
                    f"the gateway lost track of the remote command ({type(exc).__name__}); it may still run"
                )
                error = {"code": types.INTERNAL_ERROR, "message": message}
                await self._finish(task_id, "failed", message, error=error)
                return

    async def _segment(self, record: McpTaskRecord, segment_s: float) -> bool:
        """One bounded wait on the target; True once the task is finished."""
        if record.remote_task is None or record.deadline is None:
            return True
        left = record.deadline - self._store.now()
        if left <= 0:
            await self._store.settle(record.id, timed_out=True, status_message="time limit reached: stopping")
            done = await self._tasks.cancel(record.remote_task)
            await self.complete(record.id, killed=done.step != "already_exited")
            return True

        async def progress(size: int) -> None:
            await self._store.settle(
                record.id, status_message=f"running on {record.target}: {size} bytes of output so far"
            )

        waited = await self._tasks.wait(record.remote_task, timeout_s=min(segment_s, left), progress=progress)
        if waited.outcome in ("exited", "lost"):
            current = self._store.current(record.id)
            if current is not None and current.cancel_requested:
                return False  # the cancel that ended it says so
            await self.complete(record.id, killed=False)
            return True
        return False

    async def complete(self, task_id: str, *, killed: bool) -> None:
        record = self._store.current(task_id)
        if record is None or record.remote_task is None:
            return
        info = await self._tasks.status(record.remote_task)
        if info.state == "lost":
            message = (
                f"the command's supervisor on {record.target} is gone and left no exit status: it may or "
                "may not have finished"
            )
            await self._finish(task_id, "completed", message, failure=failure("transport_lost", message))
            return
        out = await self._tasks.output(record.remote_task, stream="stdout", max_bytes=self._cap)
        err = await self._tasks.output(record.remote_task, stream="stderr", max_bytes=self._cap)
        started = info.started_at or info.created_at
        finished = info.finished_at or self._store.now()
        result = ExecResult.model_validate(
            {
                "target": info.target,
                "exit_code": info.exit_code,
                "signal": info.signal,
                **_stream("stdout", out),
                **_stream("stderr", err),
                "duration_ms": round(max(0.0, finished - started) * 1000, 3),
                "timed_out": record.timed_out,
                "remote_killed": killed,
            }
        )
        code = f"exit {info.exit_code}" if info.exit_code is not None else f"signal {info.signal}"
        message = f"{'timed out; ' if record.timed_out else ''}{code} on {info.target}"
        await self._finish(task_id, "completed", message, exec_result=result.model_dump(mode="json"))


def _stream(name: str, out: TaskOutput) -> dict[str, Any]:
    """One stream of a finished remote task as ``ExecResult`` fields (what was not read counts as dropped)."""
    return {
        name: out.data,
        f"{name}_truncated": out.more or out.truncated,
        f"{name}_dropped_bytes": max(0, out.size - out.next_offset) + out.dropped_bytes,
    }


def failure(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "retryable": False, "details": {}}
