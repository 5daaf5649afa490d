"""The file of an ``admin_transaction``: read and replaced through the agent as the login user; over exec
(:mod:`.fileexec`) where the target has no agent (carrier ssh); as root through the root providers with
``privilege: root``, or with ``auto`` after the login user was refused (``EACCES`` / ``EPERM``) on a target
allowed to escalate. ``user`` never escalates: the refusal is raised. Once root, the file stays root's for
the rest of the transaction (the restore and the verification too).
"""

from __future__ import annotations

from typing import Any

from remoteops._errors import InvalidRequest, MissingCapability, RemoteOpsError
from remoteops.agent import program as proto
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode, PrivilegeReport, ProviderAttempt
from remoteops.systemd.errors import TransactionFileDenied
from remoteops.systemd.fileexec import exec_read, exec_write
from remoteops.systemd.runner import SystemdRunner

__all__ = ["MAX_FILE_BYTES", "TransactionFile"]

MAX_FILE_BYTES = 4 * 1024 * 1024


class TransactionFile:
    def __init__(
        self,
        runner: SystemdRunner,
        target: str,
        privilege: PrivilegeMode,
        escalate: bool,
        secrets: SecretSource | None,
    ) -> None:
        self.runner, self.target, self.privilege = runner, target, privilege
        self.escalate, self.secrets = escalate, secrets
        self.as_root = privilege == "root"  # from the start with root, after a refusal with auto
        self.over_exec = False  # the target has no agent (carrier ssh): the file program over exec
        self.before: tuple[ProviderAttempt, ...] = ()  # the login user's refusal
        self.report: PrivilegeReport | None = None  # who ran the last exec read or write

    def _may_escalate(self) -> bool:
        return self.privilege == "auto" and self.escalate

    def _denied(self, exc: RemoteOpsError) -> None:
        """The agent (as the login user) was refused: ``auto`` goes on as root where allowed."""
        if not self._may_escalate():
            raise exc
        reason = f"{type(exc).__name__}: {exc.detail}"[:200]
        self.before = (ProviderAttempt(provider="user", outcome="denied", reason=reason),)
        self.as_root = True

    def _root_mode(self) -> PrivilegeMode:
        return "root" if self.privilege == "root" else "auto"

    async def read(self, path: str) -> tuple[bytes, str]:
        if not self.as_root and not self.over_exec:
            try:
                return await self._agent_read(path)
            except MissingCapability:
                self.over_exec = True  # no agent here (carrier ssh): the file program as the login user
            except RemoteOpsError as exc:
                if not _access_denied(exc):
                    raise
                self._denied(exc)
        if not self.as_root:
            try:
                data, sha, report = await exec_read(
                    self.runner, self.target, path, max_bytes=MAX_FILE_BYTES, privilege="user",
                    escalate=False, secrets=None,
                )  # fmt: skip
                self.report = report
                return data, sha
            except TransactionFileDenied as exc:
                self._denied(exc)
        data, sha, report = await exec_read(
            self.runner, self.target, path, max_bytes=MAX_FILE_BYTES, privilege=self._root_mode(),
            escalate=self.escalate, secrets=self.secrets, before=self.before,
        )  # fmt: skip
        self.report = report
        return data, sha

    async def write(self, path: str, data: bytes, expected: str) -> str:
        if not self.as_root and not self.over_exec:
            try:
                return await self._agent_write(path, data, expected)
            except MissingCapability:
                self.over_exec = True
            except RemoteOpsError as exc:
                if not _access_denied(exc):
                    raise
                self._denied(exc)
        if not self.as_root:
            try:
                sha, report = await exec_write(
                    self.runner, self.target, path, data, expected, privilege="user", escalate=False,
                    secrets=None,
                )  # fmt: skip
                self.report = report
                return sha
            except TransactionFileDenied as exc:
                self._denied(exc)
        sha, report = await exec_write(
            self.runner, self.target, path, data, expected, privilege=self._root_mode(),
            escalate=self.escalate, secrets=self.secrets, before=self.before,
        )  # fmt: skip
        self.report = report
        return sha

    def facts(self) -> dict[str, Any]:
        """Who read or wrote the file (the step's ``privilege``)."""
        if self.report is None:
            return {"privilege": {"requested": self.privilege, "ran_as": "user", "via": "agent"}}
        return {"privilege": {**self.report.model_dump(mode="json"), "via": "exec"}}

    async def _agent_read(self, path: str) -> tuple[bytes, str]:
        wire = proto.wire_text(path.encode("utf-8", "surrogateescape"))
        meta, data = await self.runner.agent_request(
            self.target, proto.READ, {"path": wire, "offset": 0, "length": MAX_FILE_BYTES + 1}
        )
        if int(meta["size"]) > MAX_FILE_BYTES:
            raise InvalidRequest(target=self.target, field="change.path", reason="file larger than 4 MiB")
        return data, str(meta["sha256"])

    async def _agent_write(self, path: str, data: bytes, expected: str) -> str:
        wire = proto.wire_text(path.encode("utf-8", "surrogateescape"))
        meta, _ = await self.runner.agent_request(
            self.target,
            proto.WRITE,
            {"path": wire, "if_exists": "overwrite", "mode": None, "expected_sha256": expected},
            data,
        )
        return str(meta["sha256"])


def _access_denied(exc: RemoteOpsError) -> bool:
    # the agent's EACCES / EPERM (remoteops.files.errors.FileAccessDenied, mapped by the facade)
    return getattr(exc, "errno", None) in ("EACCES", "EPERM")
