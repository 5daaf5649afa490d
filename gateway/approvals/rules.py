"""Which calls need a human's approval (``[[approvals.rules]]``), and the request a human is shown.

:func:`matching_rule` is the first rule a call matches, or None. :class:`ShownRequest` is what the
approval page displays and what is hashed: the tool, its toolset, the target, the caller and every
argument, as canonical JSON (sorted keys, no whitespace); its :attr:`~ShownRequest.digest` is the
SHA-256 of that text. What runs after an approval is re-hashed and compared with it.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import json
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.auth.policy import Principal
from gateway.config import ApprovalRule

__all__ = ["PATH_ARGUMENTS", "ShownRequest", "call_paths", "matching_rule", "request_digest"]

PATH_ARGUMENTS = ("path", "path_b64", "source", "source_b64", "destination", "destination_b64", "remote_path")
"""The argument names holding a path on the target (the file and transfer tools)."""


def request_digest(request: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``request``."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def call_paths(arguments: Mapping[str, Any]) -> Iterator[str]:
    """The target paths a call names (``*_b64`` decoded, lossily), normalised."""
    for key in PATH_ARGUMENTS:
        value = arguments.get(key)
        if not isinstance(value, str) or not value:
            continue
        if key.endswith("_b64"):
            try:
                value = base64.b64decode(value, validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                continue
        yield posixpath.normpath(value)


def _under(path: str, prefix: str) -> bool:
    prefix = posixpath.normpath(prefix)
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _matches(
    rule: ApprovalRule, who: Principal, tool: str, toolset: str, targets: tuple[str, ...] | None, args: Any
) -> bool:
    if rule.toolsets and toolset not in rule.toolsets:
        return False
    if rule.tools and tool not in rule.tools:
        return False
    if rule.principals and not any(
        fnmatch.fnmatchcase(who.label, p) or fnmatch.fnmatchcase(who.subject, p) for p in rule.principals
    ):
        return False
    globs = rule.targets
    if globs and targets is not None and not any(fnmatch.fnmatchcase(n, g) for n in targets for g in globs):
        return False
    if rule.paths:
        paths = list(call_paths(args)) if isinstance(args, Mapping) else []
        if paths and not any(_under(path, prefix) for path in paths for prefix in rule.paths):
            return False
    return True


def matching_rule(
    rules: tuple[ApprovalRule, ...],
    who: Principal,
    *,
    tool: str,
    toolset: str,
    targets: tuple[str, ...] | None,
    arguments: Mapping[str, Any],
) -> tuple[int, ApprovalRule] | None:
    """The first rule (its index and itself) the call matches; None = it runs without approval.
    ``targets``: every target the call acts on (its ``target``, or a fleet selector's selection); None =
    not known before it runs (a rule naming targets matches: fail closed)."""
    for index, rule in enumerate(rules):
        if _matches(rule, who, tool, toolset, targets, arguments):
            return index, rule
    return None


@dataclass(frozen=True)
class ShownRequest:
    """What the human approves: exactly what will run, and who asks for it. ``arguments`` is a copy taken
    when the request was made; ``digest`` is the SHA-256 of the canonical form, fixed at that moment."""

    tool: str
    toolset: str
    target: str | None
    principal: str
    arguments: Mapping[str, Any]
    rule: str
    digest: str

    @staticmethod
    def _canonical(
        tool: str, toolset: str, target: str | None, principal: str, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "tool": tool,
            "toolset": toolset,
            "target": target,
            "principal": principal,
            "arguments": json.loads(json.dumps(arguments, default=str)),  # a deep copy, JSON-shaped
        }

    @classmethod
    def of(
        cls,
        *,
        tool: str,
        toolset: str,
        target: str | None,
        principal: str,
        arguments: Mapping[str, Any],
        rule: str,
    ) -> ShownRequest:
        canonical = cls._canonical(tool, toolset, target, principal, arguments)
        return cls(tool, toolset, target, principal, canonical["arguments"], rule, request_digest(canonical))

    def still(self, arguments: Mapping[str, Any]) -> bool:
        """Whether ``arguments`` (about to run) are still the ones shown: their digest is re-computed."""
        canonical = self._canonical(self.tool, self.toolset, self.target, self.principal, arguments)
        return request_digest(canonical) == self.digest
