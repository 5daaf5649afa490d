"""The POSIX sh programs the capabilities run on targets, kept as ``sh/*.sh`` package data beside the code
that runs them (``remoteops/tasks/sh/``, ``remoteops/sessions/sh/``) and checked by shellcheck.

A program file is sent as written, except for two kinds of line that exist for shellcheck only:

* ``# shellcheck ...`` directive lines (``disable=SC2086 # reason``, ``source=...``) are left out;
* a line ``. ./NAME.sh`` includes the fragment ``NAME.sh`` of the same directory in its place (a fragment
  shared by several programs; shellcheck follows it with ``-x``).

So what reaches the target is exactly the program text, without any of shellcheck's comments.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

__all__ = ["program"]

_INCLUDE = re.compile(r"\. \./([A-Za-z0-9_-]+\.sh)\n?")


@cache
def program(package: str, name: str) -> str:
    """The program ``sh/<name>`` of ``package`` (read once, directives left out, fragments included)."""
    text = (files(package) / "sh" / name).read_text(encoding="utf-8")
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("# shellcheck "):
            continue
        include = _INCLUDE.fullmatch(line)
        out.append(program(package, include.group(1)) if include else line)
    return "".join(out)
