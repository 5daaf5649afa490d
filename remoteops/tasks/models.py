"""Records and results of long-running remote tasks and their settings.

Its errors are in :mod:`remoteops.tasks.errors`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "TASK_ID_PATTERN",
    "CancelStep",
    "TaskCancelResult",
    "TaskHealth",
    "TaskId",
    "TaskInfo",
    "TaskMode",
    "TaskOutput",
    "TaskRecord",
    "TaskSettings",
    "TaskState",
    "TaskStream",
    "TaskWaitResult",
    "WaitOutcome",
]

TASK_ID_PATTERN = r"^t-[0-9a-f]{16}$"
TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="A task ID as returned by task_start.")]
"""A task's ID (it also names the task's directory on the target)."""

TaskState = Literal["starting", "running", "exited", "cancelled", "lost", "failed"]
FINISHED: frozenset[str] = frozenset({"exited", "cancelled", "lost", "failed"})
TaskMode = Literal["tmux", "setsid"]
TaskStream = Literal["combined", "stdout", "stderr"]
WaitOutcome = Literal["exited", "matched", "still_running", "lost"]
CancelStep = Literal["already_exited", "INT", "TERM", "KILL", "not_confirmed"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class TaskSettings(BaseModel):
    """``[tasks]`` in the gateway configuration."""

    model_config = _FROZEN

    remote_dir: str = Field(".remoteops-gateway/tasks", min_length=1, max_length=200, pattern=r"^[^\x00\n]+$")
    """Task directories on the target; relative paths are under the remote user's $HOME."""
    session: Literal["auto", "tmux", "setsid"] = "auto"
    """auto: a tmux session (gateway-owned socket) when tmux exists on the target, else setsid."""
    retention_s: float = Field(7 * 24 * 3600, ge=0)
    """Finished tasks' remote directories and records are removed this long after they finished."""
    retention_check_s: float = Field(600, gt=0)
    wait_default_s: float = Field(30, gt=0)
    wait_max_s: float = Field(600, gt=0)
    wait_segment_s: float = Field(30, gt=0, le=300)
    """One blocking wait on the target lasts at most this long (progress is reported between segments)."""
    progress_interval_s: float = Field(2, gt=0)
    """A wait returns early to report progress when output grew and this much time passed."""
    output_max_bytes: int = Field(32 * 1024, ge=1024, le=1024 * 1024)
    """``task_output`` bytes per call."""
    stream_cap_bytes: int = Field(64 * 1024 * 1024, ge=4096, le=1 << 40)
    """Bytes kept on the target per stream of a task (stdout and stderr each; the output is stored once, so
    a task's output takes at most twice this on disk). A stream keeps its first ``stream_cap_bytes``; what
    it prints after that is read on, counted and discarded (the task is neither blocked nor killed), and
    its status says ``output_truncated``."""
    cancel_grace_s: float = Field(3, gt=0, le=60)
    """Bounded wait after each of SIGINT and SIGTERM (SIGKILL gets the same) before the next step."""
    list_max: int = Field(200, ge=1, le=10000)


class TaskRecord(BaseModel):
    """What the state store keeps per task. ``exit_hash`` is sha256 of the nonce (kept nowhere itself)."""

    model_config = _FROZEN

    id: TaskId  # also names a directory that retention removes
    target: str
    argv: tuple[str, ...] | None = None
    shell: str | None = None
    cwd: str | None = None
    env_names: tuple[str, ...] = ()
    state: TaskState
    mode: TaskMode | None = None
    remote_dir: str | None = None
    exit_hash: str
    marker: str
    sup_pid: int | None = None
    sup_start: str | None = None
    session: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    cancel_step: CancelStep | None = None
    error: str | None = None
    output_bytes: int = 0
    output_cap_bytes: int | None = None  # None: started without a cap (before there was one)
    output_disk_bytes: int = 0
    output_truncated: bool = False
    dropped_stdout_bytes: int = 0
    dropped_stderr_bytes: int = 0


class TaskInfo(BaseModel):
    model_config = _FROZEN

    id: str
    target: str
    state: TaskState
    argv: list[str] | None = None
    shell: str | None = None
    cwd: str | None = None
    env_names: list[str] = Field(default_factory=list)
    mode: TaskMode | None = Field(None, description="tmux (a session on a gateway-owned socket) or setsid.")
    remote_dir: str | None = None
    session: str | None = Field(None, description="tmux session id and creation time, when tmux is used.")
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    cancel_step: CancelStep | None = None
    error: str | None = None
    output_bytes: int = Field(0, description="Bytes of combined output when last seen.")
    output_cap_bytes: int | None = Field(
        None, description="Bytes kept on the target per stream (tasks.stream_cap_bytes when it started)."
    )
    output_disk_bytes: int = Field(
        0,
        description="Bytes this task's output takes on the target (stored once: combined and its index).",
    )
    output_truncated: bool = Field(
        False,
        description="A stream reached the cap: what it printed after its first output_cap_bytes was dropped.",
    )
    dropped_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="Bytes dropped after the cap, per stream (counted per MiB and at its end).",
    )

    @classmethod
    def of(cls, record: TaskRecord) -> TaskInfo:
        return cls(
            id=record.id,
            target=record.target,
            state=record.state,
            argv=list(record.argv) if record.argv is not None else None,
            shell=record.shell,
            cwd=record.cwd,
            env_names=list(record.env_names),
            mode=record.mode,
            remote_dir=record.remote_dir,
            session=record.session,
            created_at=record.created_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
            exit_code=record.exit_code,
            signal=record.signal,
            cancel_step=record.cancel_step,
            error=record.error,
            output_bytes=record.output_bytes,
            output_cap_bytes=record.output_cap_bytes,
            output_disk_bytes=record.output_disk_bytes,
            output_truncated=record.output_truncated,
            dropped_bytes={"stdout": record.dropped_stdout_bytes, "stderr": record.dropped_stderr_bytes},
        )


class TaskOutput(BaseModel):
    model_config = _FROZEN

    id: str
    stream: TaskStream
    offset: int = Field(description="Byte offset of the first byte returned.")
    next_offset: int = Field(description="Pass as `since` to continue exactly after the returned bytes.")
    size: int = Field(description="Size of the stream on the target when read.")
    data: str
    encoding: Literal["text", "base64"]
    returned_bytes: int
    more: bool = Field(description="More bytes are already available after next_offset.")
    state: TaskState
    exit_code: int | None = None
    complete: bool = Field(description="The task has finished and everything up to its end was returned.")
    truncated: bool = Field(
        False,
        description="The stream reached the cap: it ends at `size` on the target; what the task printed "
        "after that was dropped (dropped_bytes). Offsets below `size` stay valid.",
    )
    dropped_bytes: int = Field(0, description="Bytes of this stream dropped after the cap so far.")
    disk_bytes: int = Field(0, description="Bytes of this task's output files on the target.")


class TaskWaitResult(BaseModel):
    model_config = _FROZEN

    id: str
    outcome: WaitOutcome
    state: TaskState
    exit_code: int | None = None
    signal: str | None = None
    matched: str | None = Field(None, description="The first matching line (up to 2 KiB), for `matched`.")
    output_bytes: int = Field(description="Bytes of combined output so far.")
    waited_ms: float


class TaskCancelResult(BaseModel):
    model_config = _FROZEN

    id: str
    step: CancelStep = Field(
        description="Which step ended it: already_exited, INT, TERM, KILL, not_confirmed."
    )
    state: TaskState
    exit_code: int | None = None
    signal: str | None = None
    session_removed: bool = Field(description="The supervisor (and tmux session) is gone.")


class TaskHealth(BaseModel):
    model_config = _FROZEN

    total: int
    by_state: dict[str, int]
    remote_dir: str
    session: str
    retention_s: float
    reconciling: int = Field(0, description="Recovered tasks whose remote state is still being checked.")
