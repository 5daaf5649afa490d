"""The one closed grammar of systemd unit names, as pydantic constrained types.

A unit name is ``prefix[@instance].type``: ``type`` one of :data:`UNIT_TYPES`; prefix and instance made of
``A-Z a-z 0-9 : _ . -`` and canonical escapes ``\\xHH`` (two lowercase hex digits, as ``systemd-escape``
writes them: ``systemd-fsck@dev-disk-by\\x2duuid-1234.service``); the prefix never starts with ``-`` (it
would read as an option); a template (``foo@.service``) has an empty instance; at most 255 characters.
Anything else — another backslash, whitespace, shell syntax, a glob, a path — is refused before the
target is touched. :data:`UnitName` is used by the tool arguments (so the published JSON schema states the
pattern), by :func:`check_unit` in the library's own entry points, and by the parsers of systemctl's
output (a line naming something else is not a unit).
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import Field

from remoteops._errors import InvalidRequest

__all__ = [
    "SERVICE_NAME_PATTERN",
    "UNIT_NAME_PATTERN",
    "UNIT_TYPES",
    "ServiceName",
    "UnitName",
    "UnitType",
    "check_unit",
    "is_unit_name",
    "service_unit",
]

UNIT_TYPES: Final = (
    "service",
    "socket",
    "timer",
    "path",
    "mount",
    "automount",
    "swap",
    "target",
    "slice",
    "scope",
)
_CHAR = r"(?:[A-Za-z0-9:_.-]|\\x[0-9a-f]{2})"
_FIRST = r"(?:[A-Za-z0-9:_.]|\\x[0-9a-f]{2})"
_STEM = rf"{_FIRST}{_CHAR}*(?:@{_CHAR}*)?"
UNIT_NAME_PATTERN: Final = rf"^{_STEM}\.(?:{'|'.join(UNIT_TYPES)})$"
SERVICE_NAME_PATTERN: Final = rf"^{_STEM}(?:\.service)?$"
_UNIT = re.compile(UNIT_NAME_PATTERN)
_SERVICE = re.compile(SERVICE_NAME_PATTERN)

UnitName = Annotated[
    str,
    Field(
        min_length=3,
        max_length=255,
        pattern=UNIT_NAME_PATTERN,
        description="A systemd unit name: prefix[@instance].type (type: " + ", ".join(UNIT_TYPES) + "); "
        "characters A-Z a-z 0-9 : _ . - and canonical \\xHH escapes; never starting with '-'.",
    ),
]
ServiceName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        pattern=SERVICE_NAME_PATTERN,
        description="A service name, with or without '.service' (nginx, nginx.service, getty@tty1).",
    ),
]
UnitType = Annotated[str, Field(pattern=rf"^(?:{'|'.join(UNIT_TYPES)})$")]


def is_unit_name(name: str) -> bool:
    return len(name) <= 255 and _UNIT.fullmatch(name) is not None


def check_unit(name: str, *, field: str = "unit", target: str | None = None) -> str:
    """``name`` if it is a unit name of the grammar, else :class:`InvalidRequest` naming ``field``."""
    if not isinstance(name, str) or not is_unit_name(name):
        raise InvalidRequest(
            target=target,
            field=field,
            reason="not a systemd unit name (prefix[@instance].type; A-Z a-z 0-9 : _ . - and \\xHH escapes)",
        )
    return name


def service_unit(name: str, *, field: str = "service", target: str | None = None) -> str:
    """The ``.service`` unit a service shorthand names (``nginx`` → ``nginx.service``)."""
    if not isinstance(name, str) or len(name) > 255 or _SERVICE.fullmatch(name) is None:
        raise InvalidRequest(target=target, field=field, reason="not a service name")
    return check_unit(name if name.endswith(".service") else f"{name}.service", field=field, target=target)
