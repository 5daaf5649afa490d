"""The fleet tools' arguments (selector, batching, the command or the file) and results (per-target
records, a summary, identical-output groups)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Output, decode_stdin
from gateway.tools.transfers import LocalPath, RemotePath
from remoteops import (
    CommandBody,
    FleetPlan,
    Selector,
)

__all__ = [
    "BatchIn",
    "ExecManyIn",
    "ExecManyOut",
    "ExecRecord",
    "FleetSummary",
    "OutputGroup",
    "SelectorIn",
    "TargetError",
    "TargetOutcome",
    "UploadManyIn",
    "UploadManyOut",
    "UploadRecord",
]

CountArg = int | str


class SelectorIn(Selector):
    """Which targets: ``group``, ``labels``, ``targets`` (every criterion given must hold; at least one)."""


class BatchIn(SelectorIn):
    forks: int | None = Field(
        None, ge=1, description="Targets in flight at once (default fleet.forks, at most fleet.max_forks)."
    )
    serial: CountArg | None = Field(
        None,
        description="Batch size, a count or a percentage ('25%'): a batch starts when the one before ended.",
    )
    canary: int = Field(0, ge=0, description="Run on the first N targets first; stop unless all succeed.")
    max_failures: CountArg | None = Field(
        None,
        description="Failures tolerated (count or percentage): past it no new target starts (0: stop at "
        "the first failure).",
    )
    overall_timeout_s: float | None = Field(
        None, gt=0, description="Stop the whole run after this long: running targets are killed."
    )

    def plan(self, ctx: ToolContext) -> FleetPlan:
        fleet = ctx.runtime.settings.fleet
        forks = fleet.forks if self.forks is None else self.forks
        if forks > fleet.max_forks:
            raise ToolFailure(
                ErrorCode.VALIDATION_ERROR,
                f"forks {forks} exceeds fleet.max_forks ({fleet.max_forks})",
                details={"argument": "forks", "limit": fleet.max_forks},
            )
        try:
            return FleetPlan(
                forks=forks, serial=self.serial, canary=self.canary, max_failures=self.max_failures
            )
        except ValueError as exc:
            raise ToolFailure(ErrorCode.VALIDATION_ERROR, f"invalid batching: {exc}") from None


class ExecManyIn(CommandBody, BatchIn):
    """The selector and batching, then the command (``remote_exec``'s, without ``target``)."""

    stdin: str | None = Field(None, description="Data for each command's stdin.")
    stdin_encoding: Literal["text", "base64"] = "text"
    timeout_s: float | None = Field(
        None, gt=0, description="Time limit per target, enforced locally and on the target (default 60 s)."
    )
    output_cap_bytes: int | None = Field(
        None,
        ge=256,
        description="stdout/stderr kept per target, head and tail (default fleet.output_cap_bytes).",
    )

    def stdin_bytes(self) -> bytes | None:
        return decode_stdin(self.stdin, self.stdin_encoding)


class UploadManyIn(BatchIn):
    local_path: LocalPath
    remote_path: RemotePath
    overwrite: Literal["fail", "replace", "skip"] = Field(
        "fail", description="An existing destination: fail (conflict), replace it, or skip the target."
    )
    create_parents: bool = Field(False, description="Create the destination's missing parent directories.")
    timeout_s: float | None = Field(None, gt=0, description="Time limit per target (default 3600 s).")


# ------------------------------------------------------------------------------------------------ outputs

TargetOutcome = Literal["ok", "nonzero_exit", "timeout", "error", "skipped", "policy_denied", "cancelled"]


class TargetError(Output):
    code: str
    message: str
    retryable: bool
    details: dict[str, Any] = Field(default_factory=dict)


class OutputGroup(Output):
    """Targets whose commands ended alike: same exit code, signal and (capped) stdout and stderr."""

    count: int
    targets: list[str]
    exit_code: int | None
    signal: str | None = None
    timed_out: bool = False
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False


class ExecRecord(Output):
    target: str
    outcome: TargetOutcome
    batch: int | None = Field(None, description="0 is the canary batch; None: never started.")
    exit_code: int | None = None
    duration_ms: float | None = None
    output_group: int | None = Field(None, description="Index of its output in summary.groups.")
    error: TargetError | None = None
    reason: str | None = Field(None, description="Why it was skipped or denied.")


class FleetSummary(Output):
    total: int
    counts: dict[str, int] = Field(description="Targets by outcome.")
    errors: dict[str, int] = Field(default_factory=dict, description="Failed targets by error code.")
    stopped: str | None = Field(
        None, description="Why targets were skipped: canary_failed, failure_budget, …"
    )
    batches: int
    max_in_flight: int
    wall_ms: float


class ExecManyOut(Output):
    summary: FleetSummary
    groups: list[OutputGroup]
    records: list[ExecRecord]


class UploadRecord(Output):
    target: str
    outcome: TargetOutcome
    batch: int | None = None
    duration_ms: float | None = None
    bytes_transferred: int | None = None
    sha256: str | None = Field(None, description="The verified SHA-256 of the copy on the target.")
    method: str | None = None
    error: TargetError | None = None
    reason: str | None = None


class UploadManyOut(Output):
    summary: FleetSummary
    local_path: str
    remote_path: str
    sha256: str = Field(description="SHA-256 of the local file; every ok target holds exactly this.")
    size: int
    records: list[UploadRecord]
