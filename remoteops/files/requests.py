"""The argument rules of the file operations, each written once: constrained types the gateway's tool
arguments use as they are (so the published schema states them) and ``RemoteFiles`` checks its own
arguments against (:func:`checked`, raising :class:`~remoteops.InvalidRequest` naming the field)."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

from remoteops._errors import InvalidRequest

__all__ = [
    "FileMode",
    "GrepContext",
    "MatchCount",
    "Sha256Hex",
    "TreeDepth",
    "check_bytes_or_lines",
    "checked",
]

T = TypeVar("T")

FileMode = Annotated[int, Field(ge=0, le=0o7777)]
"""Permission bits, setuid/setgid/sticky included (0..0o7777)."""
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A SHA-256 digest: 64 lowercase hex digits."""
TreeDepth = Annotated[int, Field(ge=1, le=64)]
"""How deep a walk descends (1: the directory's entries)."""
GrepContext = Annotated[int, Field(ge=0, le=20)]
"""Lines of context before and after a match."""
MatchCount = Annotated[int, Field(ge=1, le=10_000)]
"""How many matches a search returns at most."""


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def checked(field: str, kind: Any, value: T, *, target: str | None = None) -> T:
    """``value`` if it is a valid ``kind`` (one of the types above), else :class:`InvalidRequest`."""
    try:
        _adapter(kind).validate_python(value, strict=True)
    except ValidationError as exc:
        reason = exc.errors(include_url=False, include_input=False)[0]["msg"]
        raise InvalidRequest(target=target, field=field, reason=reason) from None
    return value


def check_bytes_or_lines(
    offset: int | None, length: int | None, start_line: int | None, line_count: int | None
) -> None:
    """A read takes a byte range or whole lines, never both (None: not given)."""
    given = [name for name, value in (("offset", offset), ("length", length)) if value is not None]
    lines = [
        name for name, value in (("start_line", start_line), ("line_count", line_count)) if value is not None
    ]
    if given and lines:
        raise InvalidRequest(
            f"{lines[0]} cannot be combined with {given[0]}: read bytes or lines",
            field="start_line/line_count",
            reason="not with offset/length",
        )
