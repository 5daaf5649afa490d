"""Long-running remote tasks: thin adapters over :class:`remoteops.RemoteTasks`."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from gateway._context import ToolContext
from gateway.tools._base import Input, Output, TargetName
from gateway.tools._registry import CHANGE, READ, TEARDOWN, ToolGroup
from remoteops import (
    CommandRequest,
    TaskCancelResult,
    TaskId,
    TaskInfo,
    TaskOutput,
    TaskState,
    TaskStream,
    TaskWaitResult,
    check_time_limit,
)

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs


class TaskStartIn(CommandRequest):
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables. They travel on stdin into a 0600 file on the target; "
        "only their names are recorded.",
    )


class TaskIdIn(Input):
    task_id: TaskId


class TaskOutputIn(Input):
    task_id: TaskId
    stream: TaskStream = Field("combined", description="combined (both, in arrival order), stdout or stderr.")
    since: int | None = Field(
        None, ge=0, description="Byte offset to read from (the previous call's next_offset). Default 0."
    )
    max_bytes: int | None = Field(
        None, ge=4, description="At most this many bytes (default and ceiling: tasks.output_max_bytes)."
    )
    tail: bool = Field(False, description="Return the last max_bytes instead of reading from `since`.")
    encoding: Literal["text", "base64"] = Field(
        "text", description="text: UTF-8 (an incomplete trailing character waits for the next call)."
    )

    @model_validator(mode="after")
    def _tail_or_since(self) -> Self:
        if self.tail and self.since is not None:
            raise ValueError("give either tail or since, not both")
        return self


class TaskWaitIn(Input):
    task_id: TaskId
    timeout_s: float | None = Field(
        None, ge=0, description="Wait at most this long (default tasks.wait_default_s, 30 s)."
    )
    pattern: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="POSIX extended regex (grep -E) matched per line against new output.",
    )
    since: int | None = Field(
        None, ge=0, description="Match output from this byte offset (default: output after the call)."
    )


class TaskListIn(Input):
    target: TargetName | None = None
    state: TaskState | None = None
    limit: int | None = Field(None, ge=1, description="At most this many (ceiling tasks.list_max).")


class TaskListOut(Output):
    tasks: list[TaskInfo]
    total: int = Field(description="How many tasks matched the filters (the list may be shorter).")
    truncated: bool


# Input remoteops refuses (a NUL byte, a lone surrogate, an empty program name, ...) is its InvalidRequest,
# which the one error mapping (gateway._errmap) turns into validation_error naming the field.


def _render_info(out: TaskInfo) -> str:
    what = " ".join(out.argv) if out.argv is not None else out.shell or ""
    code = f" (exit {out.exit_code})" if out.exit_code is not None else ""
    cut = ""
    if out.output_truncated:
        dropped = sum(out.dropped_bytes.values())
        cut = f"; output truncated at {out.output_cap_bytes} bytes per stream ({dropped} bytes dropped)"
    return f"task {out.id} on {out.target}: {out.state}{code}; {what[:200]}{cut}"


def _render_output(out: TaskOutput) -> str:
    head = f"{out.returned_bytes} bytes of {out.stream} from {out.offset}; next_offset {out.next_offset}"
    tail: str = "complete" if out.complete else out.state
    if out.truncated:
        tail += f"; {out.stream} truncated at {out.size} bytes, {out.dropped_bytes} bytes dropped after it"
    return f"{head} ({tail})\n{out.data}" if out.encoding == "text" else f"{head} ({tail}, base64)"


def _render_wait(out: TaskWaitResult) -> str:
    extra = f" exit {out.exit_code}" if out.outcome == "exited" else ""
    if out.outcome == "matched":
        extra = f": {(out.matched or '')[:200]}"
    took = f"after {out.waited_ms:.0f} ms; {out.output_bytes} bytes of output"
    return f"task {out.id}: {out.outcome}{extra} {took}"


def _render_list(out: TaskListOut) -> str:
    lines = [_render_info(t) for t in out.tasks]
    if out.truncated:
        lines.append(f"... {out.total - len(out.tasks)} more")
    return "\n".join(lines) or "no tasks"


def _render_cancel(out: TaskCancelResult) -> str:
    return f"task {out.id}: ended by {out.step}; state {out.state}; session removed: {out.session_removed}"


@_tools.tool(
    "task_start",
    "Start a long-running task",
    "Start argv (or a sh command string) on a target as a detached task that outlives SSH drops and "
    "gateway restarts (a tmux session on a gateway-owned socket, or setsid); returns its ID. Output is kept "
    "on the target; read it with task_output, wait with task_wait.",
    kind=CHANGE,
    render=_render_info,
)
async def task_start(ctx: ToolContext, args: TaskStartIn) -> TaskInfo:
    return await ctx.runtime.tasks.start(args.target, args.argv, args.shell, cwd=args.cwd, env=args.env)


def _own(ctx: ToolContext, tool: str, task_id: str) -> None:
    """The caller may reach this task only if it may reach the task's target (checked before the target)."""
    ctx.check_target(tool, ctx.runtime.tasks.target_of(task_id))


@_tools.tool(
    "task_status",
    "Task status",
    "State of a task (starting, running, exited, cancelled, lost, failed), checked on the target; exit "
    "code and signal once it ended.",
    render=_render_info,
)
async def task_status(ctx: ToolContext, args: TaskIdIn) -> TaskInfo:
    _own(ctx, "task_status", args.task_id)
    return await ctx.runtime.tasks.status(args.task_id)


@_tools.tool(
    "task_output",
    "Read task output",
    "Read a task's output by byte offset (since → next_offset, bounded per call) or its tail; cursors "
    "never skip or repeat a byte. Streams: combined, stdout, stderr.",
    render=_render_output,
)
async def task_output(ctx: ToolContext, args: TaskOutputIn) -> TaskOutput:
    _own(ctx, "task_output", args.task_id)
    return await ctx.runtime.tasks.output(
        args.task_id,
        stream=args.stream,
        since=args.since,
        max_bytes=args.max_bytes,
        tail=args.tail,
        encoding=args.encoding,
    )


@_tools.tool(
    "task_wait",
    "Wait for a task",
    "Block on the target until the task exits, a regex matches new output, or the timeout passes; outcome "
    "exited, matched, still_running or lost. Progress notifications carry the bytes of output so far.",
    render=_render_wait,
)
async def task_wait(ctx: ToolContext, args: TaskWaitIn) -> TaskWaitResult:
    if args.timeout_s is not None:  # refused before the task is looked up (remoteops checks it again)
        check_time_limit(args.timeout_s, ctx.runtime.settings.tasks.wait_max_s, zero_ok=True)
    _own(ctx, "task_wait", args.task_id)  # a pattern that is not one line: remoteops' InvalidRequest

    async def progress(size: int) -> None:
        await ctx.report_progress(float(size), None, f"{size} bytes of output so far")

    return await ctx.runtime.tasks.wait(
        args.task_id, timeout_s=args.timeout_s, pattern=args.pattern, since=args.since, progress=progress
    )


@_tools.tool(
    "task_list",
    "List tasks",
    "Known tasks, newest first, filterable by target and state and bounded; states as last seen "
    "(task_status checks the target).",
    render=_render_list,
    open_world=False,
)
async def task_list(ctx: ToolContext, args: TaskListIn) -> TaskListOut:
    tasks = ctx.runtime.tasks
    if args.target is not None or ctx.policy.targets(ctx.identity) is None:
        found, total = tasks.list_tasks(target=args.target, state=args.state, limit=args.limit)
        return TaskListOut(tasks=found, total=total, truncated=len(found) < total)
    # A caller restricted to some targets sees the tasks of those only (newest first, the same bound).
    names = ctx.visible_targets([t.name for t in ctx.runtime.settings.targets])
    per_target = [tasks.list_tasks(target=name, state=args.state, limit=args.limit) for name in names]
    merged = sorted((i for found, _ in per_target for i in found), key=lambda i: i.created_at, reverse=True)
    total = sum(count for _, count in per_target)
    cap = min(args.limit or ctx.runtime.settings.tasks.list_max, ctx.runtime.settings.tasks.list_max)
    return TaskListOut(tasks=merged[:cap], total=total, truncated=min(len(merged), cap) < total)


@_tools.tool(
    "task_cancel",
    "Cancel a task",
    "Stop a task: SIGINT to its process group and marked descendants, then SIGTERM, then SIGKILL after "
    "bounded waits; the result says which step ended it. The remote session is removed only once no "
    "process is left.",
    kind=TEARDOWN,
    render=_render_cancel,
    idempotent=True,
)
async def task_cancel(ctx: ToolContext, args: TaskIdIn) -> TaskCancelResult:
    _own(ctx, "task_cancel", args.task_id)
    return await ctx.runtime.tasks.cancel(args.task_id)
