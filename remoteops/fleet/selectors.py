"""Selector resolution against the allow-list (the configured targets) and a grants predicate.

Resolution happens before anything connects. A name that is not configured, or that the caller's grants
do not reach, is not an error of the whole request: it becomes a ``denied`` record (``PolicyDenied``,
reason ``not_configured`` / ``not_granted``) listed in the result beside the targets that run. What the
caller could not name at all (a group that does not exist, a selector matching nothing) is an
:class:`~remoteops.InvalidRequest`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from remoteops._errors import InvalidRequest, PolicyDenied
from remoteops._settings import TargetSpec
from remoteops.fleet.models import GroupMember, LabelMatch, Selector

__all__ = ["Resolution", "check_groups", "resolve_selector"]


@dataclass(frozen=True)
class Resolution:
    """The targets to run on (in order) and those refused, each with its :class:`PolicyDenied`."""

    selected: tuple[str, ...]
    denied: tuple[tuple[str, PolicyDenied], ...]


def _matches(target: TargetSpec, labels: Mapping[str, str]) -> bool:
    return all(target.labels.get(key) == value for key, value in labels.items())


def _expand(members: Sequence[GroupMember], targets: Sequence[TargetSpec]) -> list[str]:
    out: list[str] = []
    for member in members:
        if isinstance(member, LabelMatch):
            out.extend(t.name for t in targets if _matches(t, member.labels))
        else:
            out.append(member)
    return list(dict.fromkeys(out))  # first occurrence wins, order kept


def check_groups(groups: Mapping[str, Sequence[GroupMember]], targets: Sequence[TargetSpec]) -> None:
    """Every group member names a configured target (``ValueError`` naming the group and member)."""
    known = {t.name for t in targets}
    for name, members in groups.items():
        for index, member in enumerate(members):
            if isinstance(member, str) and member not in known:
                raise ValueError(f"group {name!r} member [{index}] {member!r} is not a configured target")


def resolve_selector(
    selector: Selector,
    targets: Sequence[TargetSpec],
    groups: Mapping[str, Sequence[GroupMember]],
    allowed: Callable[[str], bool] = lambda _name: True,
    *,
    max_targets: int | None = None,
) -> Resolution:
    """The selected names: the explicit list's order when given, else the group's, else the configured
    order; every criterion given must hold. ``allowed`` is the caller's grants (the gateway's policy)."""
    by_name = {t.name: t for t in targets}
    if selector.group is not None and selector.group not in groups:
        shown = ", ".join(sorted(groups)[:20]) or "none is configured"
        raise InvalidRequest(
            f"group {selector.group!r} is not configured (groups: {shown})",
            field="group",
            reason="not_configured",
        )
    if selector.targets is not None:
        names = list(dict.fromkeys(selector.targets))
    elif selector.group is not None:
        names = _expand(groups[selector.group], targets)
    else:
        names = list(by_name)
    members = set(_expand(groups[selector.group], targets)) if selector.group is not None else None
    denied: list[tuple[str, PolicyDenied]] = []
    selected: list[str] = []
    for name in names:
        spec = by_name.get(name)
        if spec is None:  # only an explicit list can name one
            configured = tuple(sorted(by_name))[:20]
            unknown = PolicyDenied(f"target {name!r} is not configured", target=name, configured=configured)
            denied.append((name, unknown))
            continue
        if members is not None and name not in members:
            continue
        if selector.labels and not _matches(spec, selector.labels):
            continue
        if not allowed(name):
            refusal = PolicyDenied(f"the caller may not use {name!r}", target=name, reason="not_granted")
            denied.append((name, refusal))
            continue
        selected.append(name)
    if not selected and not denied:
        raise InvalidRequest("the selector matches no configured target", field="selector", reason="empty")
    if max_targets is not None and len(selected) > max_targets:
        raise InvalidRequest(
            f"the selector matches {len(selected)} targets; at most {max_targets} (fleet.max_targets)",
            field="selector",
            reason="too_many",
        )
    return Resolution(selected=tuple(selected), denied=tuple(denied))
