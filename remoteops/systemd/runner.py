"""What the systemd operations ask of the facade, and the ``privilege: auto | user | root`` rule for them.

``auto`` runs as the login user first and escalates through the operator's root providers only after an
*observed* denial of systemd or the journal ("Interactive authentication required", "Access denied",
"insufficient permissions", ...) and only where the caller allows escalation on the target (the gateway:
``root.targets``); ``user`` never escalates; ``root`` escalates at once. A denied command did nothing, so
running it again as root is safe. The :class:`PrivilegeReport` names every attempt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from remoteops._errors import PolicyDenied
from remoteops._models import ExecResult
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode, PrivilegeReport, ProviderAttempt

__all__ = ["SystemdRunner", "denial", "run_privileged"]

_DENIAL = re.compile(
    r"interactive authentication required|access denied|insufficient permissions|permission denied|"
    r"operation not permitted|must be root|not authorized",
    re.IGNORECASE,
)


class SystemdRunner(Protocol):
    """The facade's commands with a privilege mode (``RemoteOps.run``) and its agent requests."""

    async def run(
        self,
        target: str,
        argv: Sequence[str] | None = None,
        shell: str | None = None,
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        privilege: PrivilegeMode = "user",
        secrets: SecretSource | None = None,
    ) -> ExecResult: ...

    async def agent_request(
        self, target: str, kind: int, meta: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]: ...


# journalctl of a user who can open only some journal files (their own user journal) exits 0 with this hint:
# the read succeeded but silently saw less, which is a denial for the question asked
_PARTIAL = re.compile(r"not seeing messages from other users and the system", re.IGNORECASE)


def denial(result: ExecResult) -> str | None:
    """The line of a failed command's stderr showing that systemd or the journal refused the login user
    (or journalctl's hint that it showed only what the login user may read)."""
    if result.exit_code == 0:
        match = _PARTIAL.search(result.stderr)
        return match.group(0) if match else None
    for line in result.stderr.splitlines():
        if _DENIAL.search(line):
            return line.strip()[:200]
    return None


async def run_privileged(
    runner: SystemdRunner,
    target: str,
    argv: Sequence[str],
    *,
    privilege: PrivilegeMode,
    escalate: bool,
    secrets: SecretSource | None,
    timeout_s: float | None = None,
    stdin: bytes | None = None,
    before: tuple[ProviderAttempt, ...] = (),
) -> tuple[ExecResult, PrivilegeReport]:
    """Run ``argv`` under the rule above: (result, the report of every attempt). ``before``: a denial
    already observed as the login user (a probe): ``auto`` goes straight to the root providers."""
    if privilege == "root" and not escalate:
        raise PolicyDenied(
            f"target {target!r} is not allowed to escalate to root", target=target, reason="not_root_allowed"
        )
    if privilege == "auto" and before:
        if not escalate:
            skipped = ProviderAttempt(
                provider="root", outcome="skipped", reason="escalation is not allowed on this target"
            )
            result = await runner.run(target, argv, stdin=stdin, timeout_s=timeout_s, privilege="user")
            return result, PrivilegeReport(requested=privilege, ran_as="user", attempts=(*before, skipped))
    elif privilege != "root":
        result = await runner.run(target, argv, stdin=stdin, timeout_s=timeout_s, privilege="user")
        refused = denial(result)
        if refused is None or privilege == "user":
            attempts = (
                ProviderAttempt(
                    provider="user", outcome="denied" if refused else "ran", reason=refused or ""
                ),
            )
            return result, PrivilegeReport(requested=privilege, ran_as="user", attempts=attempts)
        before = (ProviderAttempt(provider="user", outcome="denied", reason=refused),)
        if not escalate:
            skipped = ProviderAttempt(
                provider="root",
                outcome="skipped",
                reason="the target is not allowed to escalate (root.targets)",
            )
            return result, PrivilegeReport(requested=privilege, ran_as="user", attempts=(*before, skipped))
    result = await runner.run(
        target, argv, stdin=stdin, timeout_s=timeout_s, privilege="root", secrets=secrets
    )
    root = result.privilege
    tried: tuple[ProviderAttempt, ...] = (*before, *(root.attempts if root is not None else ()))
    report = PrivilegeReport(
        requested=privilege,
        ran_as="root",
        provider=root.provider if root is not None else None,
        attempts=tried,
        escalated_after_denial=bool(before),
    )
    return result, report
