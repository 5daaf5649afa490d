"""``admin_transaction``: one reversible change, health gates, and a verified rollback.

The change is a unit action, or a file replacement optionally followed by a unit action ("write nginx.conf,
then reload nginx"). The file is read and written through the agent as the login user; where the agent is
refused (``EACCES`` / ``EPERM``: a root-owned file) ``privilege: auto`` goes on as root through the root
providers on targets allowed to escalate, and ``privilege: root`` uses them from the start
(:mod:`.txfile`, :mod:`.fileexec`: the same SHA-256 precondition and atomic replace, the content on
stdin); ``user`` never escalates (the write step fails with the refusal). A target without the agent
(carrier ssh) gets the same program over exec as the login user. Then, in order:

1. ``precheck`` (optional): a gate that must pass before anything changes (else ``precheck_failed``);
2. snapshot: the unit's state, the file's bytes and SHA-256 (the file must exist: a replacement);
3. apply: the write (refused if the file changed since the snapshot), then the unit action;
4. gates (1 to 8: unit active, a TCP port answers on the target, a command exits 0, an HTTP status fetched
   on the target), polled until all pass or ``settle_s`` has passed;
5. on a failed gate, rollback: the file is restored only if its SHA-256 is still the one the transaction
   wrote (a concurrent change is reported as a ``conflict`` and left in place, never overwritten), and the
   unit is put back in its previous state (active → restart, so the old file is loaded; inactive → stop;
   the unit file state enabled/disabled/masked as it was); then the rollback is verified.

Every step is in the result, truthfully. A transport loss (or a command whose end was not seen) in the
middle is reported as ``ambiguous`` with the last step known to be done: nothing is guessed or retried, and
no rollback is attempted over a connection that just failed. A transport failure before any change was
attempted (precheck, snapshot: nothing changed) is raised as itself.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol, Self

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator

from remoteops._errors import (
    CommandTimeout,
    InvalidRequest,
    RemoteOpsError,
    TransportError,
    TransportLost,
)
from remoteops.privilege.errors import SecretRequired
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode
from remoteops.requests import RequestModel, TargetName, check_argv
from remoteops.systemd.models import UnitAction, UnitActionResult, UnitStatus
from remoteops.systemd.names import UnitName
from remoteops.systemd.runner import SystemdRunner
from remoteops.systemd.txfile import MAX_FILE_BYTES, TransactionFile

__all__ = [
    "FileChange",
    "Gate",
    "GateResult",
    "TransactionOutcome",
    "TransactionRequest",
    "TransactionResult",
    "TransactionStep",
    "UnitChange",
    "run_transaction",
]

_TCP = "import socket,sys\nsocket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()\n"
_HTTP = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=3).status)\n"
    "except urllib.error.HTTPError as e:\n    print(e.code)\n"
)
_POLL_S = 0.25


class Units(Protocol):
    """What a transaction needs of :class:`~remoteops.systemd.operations.RemoteSystemd`."""

    async def status(self, target: str, units: Sequence[str]) -> list[UnitStatus]: ...

    async def action(
        self,
        target: str,
        unit: str,
        action: UnitAction,
        *,
        privilege: PrivilegeMode = "auto",
        escalate: bool = False,
        secrets: SecretSource | None = None,
    ) -> UnitActionResult: ...


class UnitChange(RequestModel):
    kind: Literal["unit_action"] = "unit_action"
    unit: UnitName
    action: UnitAction


class ThenAction(RequestModel):
    unit: UnitName
    action: UnitAction


class FileChange(RequestModel):
    kind: Literal["file"] = "file"
    path: str = Field(min_length=2, max_length=4096, pattern=r"^/[^\x00]*$", description="Absolute path.")
    content: str = Field(max_length=MAX_FILE_BYTES * 2, description="The new content (text or base64).")
    encoding: Literal["text", "base64"] = "text"
    then: ThenAction | None = Field(None, description="A unit action after the write (e.g. reload).")

    def data(self) -> bytes:
        if self.encoding == "text":
            return self.content.encode("utf-8")
        try:
            return base64.b64decode(self.content, validate=True)
        except ValueError:
            raise InvalidRequest(field="change.content", reason="not valid base64") from None


class Gate(RequestModel):
    """One health check run on the target."""

    kind: Literal["unit_active", "tcp_port", "command", "http_status"]
    unit: UnitName | None = None
    host: str = Field("127.0.0.1", pattern=r"^[A-Za-z0-9_.:-]{1,255}$")
    port: int | None = Field(None, ge=1, le=65535)
    argv: list[str] | None = Field(None, min_length=1, max_length=64)
    url: str | None = Field(None, max_length=2048, pattern=r"^https?://[^\s\x00]+$")
    status: int = Field(200, ge=100, le=599)

    @model_validator(mode="after")
    def _fields(self) -> Self:
        need = {"unit_active": "unit", "tcp_port": "port", "command": "argv", "http_status": "url"}[self.kind]
        if getattr(self, need) is None:
            raise ValueError(f"a {self.kind} gate needs {need}")
        if self.argv is not None:
            check_argv(self.argv)
        return self


class TransactionRequest(RequestModel):
    target: TargetName
    change: Annotated[UnitChange | FileChange, Field(discriminator="kind")]
    precheck: Gate | None = None
    gates: list[Gate] = Field(min_length=1, max_length=8)
    settle_s: float = Field(10.0, ge=0, le=300, description="How long the gates may take to pass.")
    privilege: PrivilegeMode = "auto"


class GateResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: str
    passed: bool
    detail: str = ""


TransactionOutcome = Literal[
    "committed", "rolled_back", "rollback_incomplete", "precheck_failed", "change_failed", "ambiguous"
]


StepStatus = Literal["done", "failed", "conflict", "ambiguous", "skipped"]


class TransactionStep(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    """precheck | snapshot | write | unit_action | gates | restore_file | restore_unit | verify"""
    status: StepStatus
    detail: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class TransactionResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    target: str
    outcome: TransactionOutcome
    steps: list[TransactionStep]
    last_done_step: str | None
    """The last step known to be done (what an ``ambiguous`` transaction certainly reached)."""
    conflict: bool = False
    """The file was changed by someone else after the write: left in place, not restored."""
    file_sha256_before: str | None = None
    file_sha256_written: str | None = None
    duration_ms: float


class _Ambiguous(Exception):
    def __init__(self, step: str, exc: RemoteOpsError) -> None:
        super().__init__(step)
        self.step = step
        self.exc = exc


class _Run:
    def __init__(
        self,
        runner: SystemdRunner,
        systemd: Units,
        request: TransactionRequest,
        escalate: bool,
        secrets: SecretSource | None,
    ) -> None:
        self.runner, self.systemd, self.req = runner, systemd, request
        self.escalate, self.secrets = escalate, secrets
        self.steps: list[TransactionStep] = []
        self.target = request.target
        self.file = TransactionFile(runner, request.target, request.privilege, escalate, secrets)
        self.changing = False  # a change was attempted: a transport failure from now on is ambiguous

    def step(self, name: str, status: StepStatus, detail: str = "", **data: Any) -> None:
        self.steps.append(TransactionStep(name=name, status=status, detail=detail[:600], data=data))

    async def guard(self, name: str, call: Any) -> Any:
        """A transport failure is ambiguous once a change was attempted (or whenever the command may
        have run: ``TransportLost``, ``CommandTimeout``); before that, nothing changed: it is raised."""
        try:
            return await call
        except (TransportLost, CommandTimeout) as exc:
            raise _Ambiguous(name, exc) from None
        except TransportError as exc:
            if not self.changing:
                raise
            raise _Ambiguous(name, exc) from None

    async def gate(self, gate: Gate) -> GateResult:
        if gate.kind == "unit_active" and gate.unit is not None:
            state = (await self.systemd.status(self.target, [gate.unit]))[0]
            ok = state.active_state == "active"
            return GateResult(
                kind=gate.kind, passed=ok, detail=f"{gate.unit}: {state.active_state}/{state.sub_state}"
            )
        if gate.kind == "tcp_port":
            argv = ["python3", "-c", _TCP, gate.host, str(gate.port)]
        elif gate.kind == "http_status":
            argv = ["python3", "-c", _HTTP, str(gate.url)]
        else:
            argv = list(gate.argv or ())
        out = await self.runner.run(self.target, argv, timeout_s=30)
        if gate.kind == "http_status":
            got = out.stdout.strip()
            return GateResult(
                kind=gate.kind,
                passed=got == str(gate.status),
                detail=f"HTTP {got or out.stderr.strip()[-200:]}",
            )
        tail = out.stderr.strip()[-200:]
        return GateResult(
            kind=gate.kind, passed=out.exit_code == 0, detail=f"exit {out.exit_code} {tail}".strip()
        )

    async def gates(self, gates: list[Gate], settle_s: float) -> list[GateResult]:
        deadline = time.monotonic() + settle_s
        while True:
            results = [await self.gate(g) for g in gates]
            if all(r.passed for r in results) or time.monotonic() >= deadline:
                return results
            await anyio.sleep(_POLL_S)  # polling the target's health (bounded by settle_s)

    async def action(self, unit: str, action: UnitAction) -> UnitActionResult:
        return await self.systemd.action(
            self.target, unit, action, privilege=self.req.privilege, escalate=self.escalate,
            secrets=self.secrets,
        )  # fmt: skip


def _is_conflict(exc: RemoteOpsError) -> bool:
    # the agent's compare-and-swap refusal (remoteops.files.errors.FileConflict, mapped by the facade)
    return getattr(exc, "reason", None) == "sha256_mismatch"


def _unit_back(before: UnitStatus, action: str) -> list[UnitAction]:
    """The actions that put a unit back where ``before`` found it (after its file was restored)."""
    if action in ("enable", "disable"):
        return ["enable" if before.unit_file_state == "enabled" else "disable"]
    if action in ("mask", "unmask"):
        return ["mask" if before.unit_file_state in ("masked", "masked-runtime") else "unmask"]
    return ["restart" if before.active_state in ("active", "reloading") else "stop"]


def _matches(before: UnitStatus, now: UnitStatus | None, action: str) -> bool:
    if now is None:
        return False
    if action in ("enable", "disable", "mask", "unmask"):
        return now.unit_file_state == before.unit_file_state
    was = before.active_state in ("active", "reloading")
    return (now.active_state == "active") == was


async def run_transaction(
    runner: SystemdRunner,
    systemd: Units,
    request: TransactionRequest,
    *,
    escalate: bool = False,
    secrets: SecretSource | None = None,
) -> TransactionResult:
    started = time.monotonic()
    run = _Run(runner, systemd, request, escalate, secrets)
    change = request.change
    unit_change = change if isinstance(change, UnitChange) else change.then
    original: bytes | None = None
    sha_before = sha_written = None
    conflict = False
    outcome: TransactionOutcome

    def done(outcome: TransactionOutcome) -> TransactionResult:
        last = next((s.name for s in reversed(run.steps) if s.status == "done"), None)
        return TransactionResult(
            target=request.target, outcome=outcome, steps=run.steps, last_done_step=last, conflict=conflict,
            file_sha256_before=sha_before, file_sha256_written=sha_written,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )  # fmt: skip

    try:
        if request.precheck is not None:
            pre = await run.guard("precheck", run.gate(request.precheck))
            run.step("precheck", "done" if pre.passed else "failed", pre.detail)
            if not pre.passed:
                return done("precheck_failed")
        before: UnitStatus | None = None
        if unit_change is not None:
            before = (await run.guard("snapshot", systemd.status(request.target, [unit_change.unit])))[0]
        if isinstance(change, FileChange):
            original, sha_before = await run.guard("snapshot", run.file.read(change.path))
        facts = run.file.facts() if isinstance(change, FileChange) else {}
        run.step(
            "snapshot", "done", unit=before.model_dump(mode="json") if before else None, sha256=sha_before,
            **facts,
        )  # fmt: skip
        if isinstance(change, FileChange) and sha_before is not None:
            run.changing = True
            try:
                sha_written = await run.guard("write", run.file.write(change.path, change.data(), sha_before))
            except (_Ambiguous, SecretRequired):
                raise  # SecretRequired: nothing was written; the human's password entry is the answer
            except RemoteOpsError as exc:
                run.step(
                    "write",
                    "conflict" if _is_conflict(exc) else "failed",
                    f"{type(exc).__name__}: {exc.detail}",
                    **run.file.facts(),
                )
                return done("change_failed")
            run.step("write", "done", sha256=sha_written, size=len(change.data()), **run.file.facts())
        if unit_change is not None:
            run.changing = True
            acted = await run.guard("unit_action", run.action(unit_change.unit, unit_change.action))
            run.step(
                "unit_action", "done" if acted.job_result == "done" else "failed", acted.message,
                action=unit_change.action, unit=unit_change.unit, job_result=acted.job_result,
                after=acted.after.model_dump(mode="json") if acted.after else None,
                privilege=acted.privilege.model_dump(mode="json"),
            )  # fmt: skip
        results = await run.guard("gates", run.gates(request.gates, request.settle_s))
        passed = all(r.passed for r in results)
        run.step("gates", "done" if passed else "failed", gates=[r.model_dump() for r in results])
        if passed:
            return done("committed")
        # -- rollback ----------------------------------------------------------------------------------
        complete = True
        if isinstance(change, FileChange) and original is not None and sha_written is not None:
            try:
                restored = await run.guard("restore_file", run.file.write(change.path, original, sha_written))
                run.step("restore_file", "done", sha256=restored, **run.file.facts())
            except _Ambiguous:
                raise
            except RemoteOpsError as exc:
                if _is_conflict(exc):
                    conflict = True
                    current = getattr(exc, "current_sha256", None)
                    left = "changed by someone else since the write: left in place"
                    run.step("restore_file", "conflict", left, current_sha256=current)
                else:
                    run.step("restore_file", "failed", f"{type(exc).__name__}: {exc.detail}")
                complete = False
        if unit_change is not None and before is not None:
            for back in _unit_back(before, unit_change.action):
                undo = await run.guard("restore_unit", run.action(unit_change.unit, back))
                run.step("restore_unit", "done" if undo.job_result == "done" else "failed", undo.message,
                         action=back, job_result=undo.job_result)  # fmt: skip
        # -- verification ------------------------------------------------------------------------------
        checks: dict[str, bool] = {}
        if isinstance(change, FileChange) and not conflict:
            _, now_sha = await run.guard("verify", run.file.read(change.path))
            checks["file_restored"] = now_sha == sha_before
        if unit_change is not None and before is not None:
            now = (await run.guard("verify", systemd.status(request.target, [unit_change.unit])))[0]
            checks["unit_state_restored"] = _matches(before, now, unit_change.action)
        verified = all(checks.values())
        run.step("verify", "done" if verified else "failed", "", **checks)
        outcome = "rolled_back" if complete and verified else "rollback_incomplete"
        return done(outcome)
    except _Ambiguous as amb:
        run.step(amb.step, "ambiguous", f"{type(amb.exc).__name__}: {amb.exc.detail}; not retried")
        return done("ambiguous")
