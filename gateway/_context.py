"""What a tool adapter receives: the runtime plus who is calling (and what the policy lets them reach) and
how to report progress.

Above ``gateway._runtime`` (which builds the catalog of ``gateway._catalog``) and below the tools and the
dispatcher: a handler's context is this, the catalog does not need to know it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway._runtime import Runtime
from gateway.auth.policy import Policy, Principal
from gateway.secrets.broker import Resume, UrlElicitor
from upstream import ProgressCallback

__all__ = ["ToolContext"]


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


@dataclass(frozen=True)
class ToolContext:
    runtime: Runtime
    request_id: str
    principal: str
    """The caller's label (``identity.label``), as in logs and the audit record."""
    report_progress: ProgressCallback = _no_progress
    identity: Principal = field(default_factory=lambda: Principal.operator("anonymous", "anonymous"))
    """The typed caller: subject, client id, scopes, groups, how it authenticated."""
    policy: Policy = field(default_factory=Policy.unrestricted)
    """The server's one policy; tools that list things (``target_list``) show only what it allows."""
    audit_facts: dict[str, Any] = field(default_factory=dict)
    """Facts a tool adds to its call's audit record (e.g. a transfer's paths, sizes and hashes)."""
    elicitor: UrlElicitor | None = None
    """The calling client's URL-mode elicitation, when it declared it and the call has a back-channel."""
    resume: Resume | None = None
    """A 2026-07-28 retry answering the password page's ``InputRequiredResult``."""

    def visible_targets(self, names: list[str]) -> list[str]:
        return self.policy.visible_targets(self.identity, names)

    def check_target(self, tool: str, target: str) -> None:
        """``policy_denied`` unless the caller may use ``target``: for tools that name a task, forward or
        session by id rather than a target (the dispatcher checks a ``target`` argument itself). The
        target goes into the call's audit record."""
        self.audit_facts["target"] = target
        self.policy.check_target(self.identity, tool=tool, target=target)
