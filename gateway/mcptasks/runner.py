""":class:`McpTasks`: create, run, watch, cancel and recover the work behind MCP tasks.

Two kinds of work:

* **Remote commands** (``remote_exec`` as a task): started on the target as a detached remoteops task
  (:class:`remoteops.RemoteTasks`) *before* the task handle is returned, so the command outlives a client
  drop and a gateway restart. A watcher waits for it **on the target** in bounded segments, keeps the
  status message current (bytes of output), enforces the call's ``timeout_s`` (the remote task is cancelled
  at the deadline) and, once it exited, reads stdout and stderr back into an ``ExecResult`` (``remote``).
  After a restart the watcher of every working remote task starts again from the record: the same task id
  completes with the command's real exit code.
* **Local work** (any other own tool): the ordinary dispatch of the call, run in this process. It cannot
  survive a restart: a record found ``working`` at start-up is marked ``failed`` with the reason, never
  completed.

Cancellation uses the tool's own path: the remote task's INT → TERM → KILL with confirmation on the target,
or the cancellation of the local call (a transfer's process group is stopped by its supervisor).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import mcp_types as types
import structlog
from mcp import MCPError

from gateway.audit.log import AuditLog
from gateway.config import McpTaskSettings
from gateway.mcptasks.records import Generation, McpTaskRecord
from gateway.mcptasks.remote import RemoteCommand, RemoteWatcher
from gateway.mcptasks.store import McpTaskStore, new_task_id
from remoteops import RemoteOpsError, RemoteTasks, StateStore

__all__ = ["LocalRun", "McpTasks"]

_log = structlog.get_logger("gateway.mcptasks")

Progress = Callable[[float, float | None, str | None], Awaitable[None]]
LocalRun = Callable[[Progress, Mapping[str, Any] | None, str | None], Awaitable[Any]]
"""The call's ordinary dispatch: ``(progress, input_responses, request_state) -> CallToolResult`` (or an
``InputRequiredResult``, answered through ``tasks/update``); raises ``MCPError`` for a protocol error."""

RESTARTED = (
    "the gateway restarted while this call ran inside it (local work, such as a transfer, does not survive a "
    "restart); its outcome is unknown: check the target before running it again"
)
_RETRY_S = 2.0
_SEGMENT_S = 20.0


@dataclass
class _Local:
    run: LocalRun
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    answers: anyio.Event = field(default_factory=anyio.Event)
    responses: dict[str, Any] = field(default_factory=dict)


class McpTasks:
    """The MCP tasks of this gateway. An async context manager (entered by the runtime)."""

    def __init__(
        self,
        state: StateStore,
        settings: McpTaskSettings,
        remote: RemoteTasks,
        audit: AuditLog,
        *,
        output_cap_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = McpTaskStore(state, clock=clock)
        self._remote = remote
        self._audit = audit
        self._watcher = RemoteWatcher(self.store, remote, self._finish, output_cap_bytes=output_cap_bytes)
        self._local: dict[str, _Local] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        records = await self.store.load()
        self._stack = AsyncExitStack()
        tg = self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        for record in records:
            if record.terminal:
                continue
            if record.durable and record.remote_task is not None:
                tg.start_soon(self._watcher.watch, record.id)
            else:  # work that lived in the previous process: say so, never claim it completed
                error = {"code": types.INTERNAL_ERROR, "message": RESTARTED}
                await self._finish(record.id, "failed", RESTARTED, error=error)
        tg.start_soon(self._purge_loop)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, tg, self._stack, self._tg = self._stack, self._tg, None, None
        if tg is not None and stack is not None:
            tg.cancel_scope.cancel()  # watchers stop; the remote commands keep running on their targets
            await stack.__aexit__(exc_type, exc, tb)
        return None

    def _group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise RuntimeError("McpTasks is not entered")
        return self._tg

    async def _purge_loop(self) -> None:
        while True:
            await anyio.sleep(60)  # a periodic sweep; lookups already hide expired tasks
            try:
                await self.store.purge_expired()
            except OSError as exc:  # the state directory refused: try again next time, never crash
                _log.warning("mcp_task_purge_failed", error=type(exc).__name__)

    # -- creation ------------------------------------------------------------------------------------------
    def _ttl_ms(self, requested_ms: int | None) -> int:
        ceiling = int(self.settings.ttl_s * 1000)
        return ceiling if requested_ms is None else max(60_000, min(requested_ms, ceiling))

    def _new(
        self, principal: str, generation: Generation, tool: str, ttl_ms: int | None, **fields: Any
    ) -> McpTaskRecord:
        now = self.store.now()
        return McpTaskRecord(
            id=new_task_id(),
            principal=principal,
            generation=generation,
            tool=tool,
            created_at=now,
            updated_at=now,
            ttl_ms=self._ttl_ms(ttl_ms),
            poll_interval_ms=self.settings.poll_interval_ms,
            **fields,
        )

    def health(self) -> dict[str, Any]:
        """Counts for ``gateway_health``: records by status and generation, events since start."""
        return {
            "enabled": self.settings.enabled,
            "threshold_s": self.settings.threshold_s,
            "ttl_s": self.settings.ttl_s,
            "running_here": len(self._local),
            **self.store.health(),
        }

    def has_room(self, principal: str) -> bool:
        return self.store.active(principal) < self.settings.max_active_per_principal

    async def create_remote(
        self, principal: str, generation: Generation, command: RemoteCommand, *, ttl_ms: int | None = None
    ) -> McpTaskRecord:
        """Start the command as a remote task, then record the MCP task (both durable before returning).
        A start that fails raises the remoteops error: nothing ran, the call fails as a direct one would."""
        info = await self._remote.start(
            command.target, command.argv, command.shell, cwd=command.cwd, env=command.env
        )
        record = self._new(
            principal,
            generation,
            "remote_exec",
            ttl_ms,
            target=command.target,
            durable=True,
            remote_task=info.id,
            deadline=self.store.now() + command.timeout_s,
            status_message=f"running on {command.target} (remote task {info.id})",
        )
        await self.store.save(record)
        self._created(record)
        self._group().start_soon(self._watcher.watch, record.id)
        return record

    async def create_local(
        self,
        principal: str,
        generation: Generation,
        tool: str,
        target: str | None,
        run: LocalRun,
        *,
        ttl_ms: int | None = None,
    ) -> McpTaskRecord:
        record = self._new(
            principal,
            generation,
            tool,
            ttl_ms,
            target=target,
            durable=False,
            status_message=f"{tool} running in the gateway",
        )
        await self.store.save(record)
        self._created(record)
        local = self._local[record.id] = _Local(run)
        self._group().start_soon(self._run_local, record.id, local)
        return record

    def _created(self, record: McpTaskRecord) -> None:
        self.store.counters["created"] += 1
        self._event("mcp_task_created", record)

    def _event(self, event: str, record: McpTaskRecord, **facts: Any) -> None:
        self._audit.mcp_task(
            event,
            task_id=record.id,
            principal=record.principal,
            tool=record.tool,
            target=record.target,
            status=record.status,
            generation=record.generation,
            facts={"remote_task": record.remote_task, **facts} if record.remote_task else facts or None,
        )

    # -- reading -------------------------------------------------------------------------------------------
    def get(self, task_id: str, principal: str) -> McpTaskRecord:
        record = self.store.find(task_id, principal)
        self.store.counters["polled"] += 1
        self._event("mcp_task_polled", record)
        return record

    async def wait_terminal(self, task_id: str, principal: str) -> McpTaskRecord:
        """Block until the task is terminal (2025-11-25 ``tasks/result``)."""
        while True:
            record = self.store.find(task_id, principal)
            if record.terminal:
                return record
            await self.store.changed(task_id)

    def list_for(self, principal: str) -> list[McpTaskRecord]:
        return self.store.owned_by(principal)

    # -- finishing -----------------------------------------------------------------------------------------
    async def _finish(self, task_id: str, status: str, message: str, **update: Any) -> McpTaskRecord | None:
        """Move a task to a terminal status once (a later attempt finds it terminal and does nothing)."""
        record = await self.store.settle(
            task_id, status=status, status_message=message, input_requests=None, **update
        )
        if record is None:
            return None
        self._local.pop(task_id, None)
        if status == "cancelled":
            self.store.counters["cancelled"] += 1
        else:
            self.store.counters["completed"] += 1
        self._event("mcp_task_completed", record)
        return record

    # -- local work ----------------------------------------------------------------------------------------
    async def _run_local(self, task_id: str, local: _Local) -> None:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            of = f" of {total:g}" if total is not None else ""
            text = f"{done:g}{of}" + (f": {message}" if message else "")
            await self.store.settle(task_id, status_message=text)

        responses: Mapping[str, Any] | None = None
        state: str | None = None
        with local.scope:
            try:
                while True:
                    outcome = await local.run(progress, responses, state)
                    if not isinstance(outcome, types.InputRequiredResult):
                        break
                    responses, state = await self._ask(task_id, local, outcome)
            except MCPError as exc:
                error = exc.error.model_dump(mode="json", exclude_none=True)
                await self._finish(task_id, "failed", exc.error.message, error=error)
                return
            except Exception as exc:
                _log.error("mcp_task_local_error", task=task_id, exc_info=exc)
                error = {
                    "code": types.INTERNAL_ERROR,
                    "message": f"unexpected gateway error ({type(exc).__name__})",
                }
                await self._finish(task_id, "failed", error["message"], error=error)
                return
            dumped = outcome.model_dump(mode="json", by_alias=True, exclude_none=True)
            verdict = "finished with an error result" if outcome.is_error else "finished"
            await self._finish(task_id, "completed", verdict, result=dumped)
        if local.scope.cancelled_caught:
            await self._finish(task_id, "cancelled", "cancelled by the client: the call was stopped")

    async def _ask(
        self, task_id: str, local: _Local, asked: types.InputRequiredResult
    ) -> tuple[Mapping[str, Any], str | None]:
        """``input_required`` until ``tasks/update`` answers every request (2026-07-28 tasks only)."""
        record = self.store.current(task_id)
        answered = set(record.answered) if record is not None else set()
        requests = {
            key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, value in (asked.input_requests or {}).items()
        }
        fresh = {f"{key}-{len(answered) + 1}": value for key, value in requests.items()}  # never reused
        local.answers, local.responses = anyio.Event(), {}
        await self.store.settle(
            task_id,
            status="input_required",
            status_message="waiting for input: " + ", ".join(sorted(fresh)),
            input_requests=fresh,
            request_state=asked.request_state,
        )
        while set(fresh) - set(local.responses):
            await local.answers.wait()
            local.answers = anyio.Event()
        await self.store.settle(
            task_id,
            status="working",
            status_message="input received, continuing",
            input_requests=None,
            answered=tuple(sorted(answered | set(fresh))),
        )
        by_original = {key.rsplit("-", 1)[0]: local.responses[key] for key in fresh}
        return by_original, asked.request_state

    async def update(self, task_id: str, principal: str, responses: Mapping[str, Any]) -> None:
        """``tasks/update``: answers for outstanding input requests; others are ignored (as the spec asks)."""
        record = self.store.find(task_id, principal)
        local = self._local.get(task_id)
        outstanding = set(record.input_requests or {})
        if local is None or record.status != "input_required":
            return
        for key, value in responses.items():
            if key in outstanding:
                local.responses[key] = value
        local.answers.set()

    # -- cancellation --------------------------------------------------------------------------------------
    async def cancel(self, task_id: str, principal: str) -> McpTaskRecord:
        """Stop the work through the tool's own cancel path; the task ends ``cancelled`` unless the work
        had already finished."""
        record = self.store.find(task_id, principal)
        if record.terminal:
            return record
        asked = await self.store.settle(task_id, cancel_requested=True, status_message="cancelling")
        if asked is None:  # it finished meanwhile
            return self.store.find(task_id, principal)
        record = asked
        self._event("mcp_task_cancelled", record)
        if record.remote_task is not None:
            try:
                done = await self._remote.cancel(record.remote_task)
            except (RemoteOpsError, TimeoutError) as exc:
                await self.store.settle(task_id, cancel_requested=False)
                raise MCPError(
                    types.INTERNAL_ERROR, f"the target did not confirm the cancel ({type(exc).__name__})"
                ) from exc
            if done.step == "already_exited":
                await self.store.settle(task_id, cancel_requested=False)
                await self._watcher.complete(task_id, killed=False)
            else:
                await self._finish(
                    task_id,
                    "cancelled",
                    f"cancelled: the remote command was stopped by {done.step} (confirmed on the target)",
                    exec_result=None,
                )
        else:
            local = self._local.get(task_id)
            if local is not None:
                local.scope.cancel()
            else:
                await self._finish(task_id, "cancelled", "cancelled by the client")
        with anyio.move_on_after(5):  # the local call's own clean-up (a transfer stopping its process)
            while not self.store.find(task_id, principal).terminal:
                await self.store.changed(task_id)
        return self.store.find(task_id, principal)
