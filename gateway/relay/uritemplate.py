"""Does a URI match an RFC 6570 URI template? The test that gates `resources/read` per template.

Matching is by regular expression over the template's expressions, each taking what its operator can
expand to: a simple `{var}` never spans a `/`, `?` or `#` (reserved characters are percent-encoded in
simple expansion), `{+var}` spans `/` but not `?` or `#`, `{?a,b}` and `{&a}` take the query, `{#f}`
the fragment, `{/a}`, `{.a}` and `{;a}` their prefixed segments. A template that cannot be parsed
matches nothing — and, where it is an *excluded* template, the gateway's caller treats that as a
configuration it cannot enforce (see `gateway.relay.surface`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

__all__ = ["TemplateError", "matches"]

_EXPRESSION: Final = re.compile(r"\{([^{}]*)\}")
_VARCHAR: Final = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_VARNAME: Final = re.compile(rf"^{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9]\d{{0,3}}|\*)?$")
_OPERATORS: Final[dict[str, str]] = {
    "": r"[^/?#]*",
    "+": r"[^?#]*",
    "#": r"(?:#.*)?",
    ".": r"(?:\.[^/?#.]*)*",
    "/": r"(?:/[^/?#]*)*",
    ";": r"(?:;[^/?#]*)*",
    "?": r"(?:\?[^#]*)?",
    "&": r"(?:&[^#]*)*",
}


class TemplateError(ValueError):
    """The string is not a URI template this module understands."""


@lru_cache(maxsize=1024)
def _compile(template: str) -> re.Pattern[str]:
    pattern = ""
    position = 0
    for found in _EXPRESSION.finditer(template):
        literal = template[position : found.start()]
        if "{" in literal or "}" in literal:
            raise TemplateError(f"unbalanced brace in {template!r}")
        pattern += re.escape(literal)
        body = found.group(1)
        operator = body[:1] if body[:1] in _OPERATORS and body[:1] != "" else ""
        names = body[len(operator) :].split(",")
        if not body or not all(_VARNAME.match(name) for name in names):
            raise TemplateError(f"bad expression {{{body}}} in {template!r}")
        pattern += _OPERATORS[operator]
        position = found.end()
    tail = template[position:]
    if "{" in tail or "}" in tail:
        raise TemplateError(f"unbalanced brace in {template!r}")
    pattern += re.escape(tail)
    return re.compile(pattern, re.DOTALL)


def matches(template: str, uri: str) -> bool:
    """Whether `uri` is an expansion of `template`. Raises `TemplateError` for a malformed template."""
    return _compile(template).fullmatch(uri) is not None
