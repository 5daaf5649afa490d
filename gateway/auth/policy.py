"""Who is calling, and the one object that decides what they may see and do.

A :class:`Principal` is built once per request from the authenticated token (or the stdio user): its
subject, client id, scopes, groups and how it authenticated. :class:`Policy` answers every question about
it — which toolsets it reaches (``tools/list`` shows only those, a call outside them is ``policy_denied``)
and which targets (``target_list`` shows only those; a call naming another target is ``policy_denied``
before any connection is made). Toolset-based, so tools added later are covered without naming them.

The static bearer token, stdio and ``auth.mode = "none"`` stand for the single operator: unrestricted
(the operator's configuration of toolsets and targets is the limit). OAuth and trusted-proxy callers get
the toolsets their scopes map to (``auth.scopes``) and, when ``auth.grants`` is non-empty, only the targets
of the grants they match by subject or group — none when they match no grant (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from mcp.server.auth.provider import AccessToken

from gateway._errors import ErrorCode, ToolFailure
from gateway.config import AuthSettings, TargetGrant

__all__ = ["GROUPS_CLAIM", "KIND_CLAIM", "Policy", "Principal", "PrincipalKind"]

PrincipalKind = Literal["oauth", "proxy", "bearer", "stdio", "anonymous"]
KIND_CLAIM = "remoteops-gateway/kind"
"""Key in ``AccessToken.claims`` naming how the caller authenticated (set by the gateway's verifiers)."""
GROUPS_CLAIM = "remoteops-gateway/groups"
_OPERATOR_KINDS = frozenset({"bearer", "stdio", "anonymous"})
_log = structlog.get_logger("gateway.policy")


@dataclass(frozen=True)
class Principal:
    kind: PrincipalKind
    subject: str
    client_id: str
    scopes: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """Short, stable name for logs and the audit record: ``oauth:alice``, ``bearer:operator``; the
        stdio user's name as given (``stdio:1000``)."""
        if self.kind in ("stdio", "anonymous"):
            return self.subject
        return f"{self.kind}:{self.subject}"

    def audit_fields(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "client_id": self.client_id,
            "scopes": sorted(self.scopes),
        }

    @classmethod
    def operator(cls, kind: PrincipalKind, name: str) -> Principal:
        return cls(kind=kind, subject=name, client_id=name)


def _str_set(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, (list, tuple)):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


@dataclass(frozen=True)
class Policy:
    """Decisions for listing and for dispatch, from the ``auth`` settings (one instance per server)."""

    scope_toolsets: Mapping[str, tuple[str, ...]]
    grants: tuple[TargetGrant, ...] = ()
    _unrestricted: frozenset[str] = field(default=_OPERATOR_KINDS)

    @classmethod
    def from_settings(cls, auth: AuthSettings) -> Policy:
        return cls(scope_toolsets=dict(auth.scopes), grants=auth.grants)

    @classmethod
    def unrestricted(cls) -> Policy:
        """Every principal is the operator (direct tool-adapter calls in tests; never used for serving)."""
        return cls(scope_toolsets={}, _unrestricted=frozenset({"oauth", "proxy"}) | _OPERATOR_KINDS)

    # ------------------------------------------------------------------------------------ principals

    def principal(self, token: AccessToken | None, fallback: Principal) -> Principal:
        """The caller of this request: from the token the SDK's bearer middleware verified, else ``fallback``
        (the stdio user, or anonymous when auth is off)."""
        if token is None:
            return fallback
        claims = token.claims or {}
        kind = claims.get(KIND_CLAIM)
        if kind == "bearer":  # only the static-token verifier says so
            return Principal.operator("bearer", token.client_id)
        return Principal(  # anything else is restricted to its scopes (fail closed)
            kind="proxy" if kind == "proxy" else "oauth",
            subject=token.subject or token.client_id,
            client_id=token.client_id,
            scopes=frozenset(token.scopes),
            groups=_str_set(claims.get(GROUPS_CLAIM)),
        )

    # ------------------------------------------------------------------------------------- decisions

    def toolsets(self, who: Principal) -> frozenset[str] | None:
        """The toolsets ``who`` reaches; None = all (the operator)."""
        if who.kind in self._unrestricted:
            return None
        return frozenset(t for scope in who.scopes for t in self.scope_toolsets.get(scope, ()))

    def allows_toolset(self, who: Principal, toolset: str) -> bool:
        allowed = self.toolsets(who)
        return allowed is None or toolset in allowed

    def targets(self, who: Principal) -> frozenset[str] | None:
        """The targets ``who`` reaches; None = every configured one."""
        if who.kind in self._unrestricted or not self.grants:
            return None
        out: set[str] = set()
        for grant in self.grants:
            by_subject = bool(grant.subject) and grant.subject == who.subject
            if by_subject or (bool(grant.group) and grant.group in who.groups):
                out.update(grant.targets)
        return frozenset(out)

    def allows_target(self, who: Principal, target: str) -> bool:
        allowed = self.targets(who)
        return allowed is None or target in allowed

    def visible_targets(self, who: Principal, names: Iterable[str]) -> list[str]:
        return [name for name in names if self.allows_target(who, name)]

    def scope_challenge(self, who: Principal, toolset: str) -> tuple[str, ...] | None:
        """The scopes an OAuth caller should ask its authorization server for to reach ``toolset`` (MCP
        step-up authorization: HTTP 403 ``insufficient_scope`` with ``scope="…"``), or None when there is
        nothing to step up to: the caller reaches ``toolset`` already, is not an OAuth token holder (a
        proxied or operator caller gets ``policy_denied``), or no configured scope opens ``toolset``.

        The answer keeps the caller's configured scopes and adds the narrowest scope that opens
        ``toolset`` (fewest toolsets, then table order): a client that replaces its scopes with the
        challenge's (MCP 2025-11-25) and one that adds them to its own (2026-07-28) both keep what they
        had. Scopes the table does not know are not repeated."""
        if who.kind != "oauth" or self.allows_toolset(who, toolset):
            return None
        opening = [scope for scope, toolsets in self.scope_toolsets.items() if toolset in toolsets]
        if not opening:
            return None
        narrowest = min(opening, key=lambda scope: len(self.scope_toolsets[scope]))
        kept = [scope for scope in self.scope_toolsets if scope in who.scopes]
        return (*kept, narrowest)

    def check_call(self, who: Principal, *, tool: str, toolset: str, target: str | None) -> None:
        """Raise ``policy_denied`` unless ``who`` may call ``tool`` (of ``toolset``) on ``target``."""
        if not self.allows_toolset(who, toolset):
            _log.warning("policy_denied", principal=who.label, tool=tool, toolset=toolset)
            raise ToolFailure(
                ErrorCode.POLICY_DENIED,
                f"{tool} is in toolset {toolset!r}, which the caller's scopes do not grant",
                details={"tool": tool, "toolset": toolset, "scopes": sorted(who.scopes)},
            )
        if target is not None:
            self.check_target(who, tool=tool, target=target)

    def check_target(self, who: Principal, *, tool: str, target: str) -> None:
        """Raise ``policy_denied`` unless ``who`` may use ``target`` (also for a tool naming a task or a
        forward by id, once its record says where it runs)."""
        if not self.allows_target(who, target):
            _log.warning("policy_denied", principal=who.label, tool=tool, target=target)
            raise ToolFailure(
                ErrorCode.POLICY_DENIED,
                f"the caller may not use target {target!r}",
                details={"tool": tool, "target": target},
            )
