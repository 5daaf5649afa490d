"""The command's entry point, before any heavy import: what must happen first happens here.

``remoteops-gateway`` (and ``python -m gateway``) start in this module, which imports the standard library
only; the command line proper (``gateway.cli``, which loads the MCP SDK, pydantic, structlog, uvicorn) is
imported after it. Before that import, for the commands that serve:

* optional packages that serving never uses are kept out (:data:`KEPT_OUT`): structlog imports ``rich``,
  ``colorama``, ``better_exceptions`` and ``greenlet``, and uvicorn ``watchfiles``, whenever they are
  installed — a development venv has them (the test and docs extras), a plain install does not. Each is an
  optional import its importer does without (``except ImportError``); kept out, the development venv's
  serving gateway has the plain install's modules and RSS;
* ``serve --stdio``: the stdio upstreams of the configuration file are spawned at once
  (``gateway._early``), so their start-up overlaps the gateway's own imports.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gateway._early import EarlyUpstreams, spawn_early

__all__ = ["KEPT_OUT", "keep_out_unused", "main"]

KEPT_OUT = ("rich", "colorama", "better_exceptions", "greenlet", "watchfiles")
"""Optional imports of structlog (pretty console output, tracebacks, greenlet-local context) and uvicorn
(``--reload`` file watching) that the serving gateway never uses (it renders JSON and does not reload)."""

_SERVING = frozenset({"serve", "demo"})


def keep_out_unused() -> None:
    """Make the optional imports in :data:`KEPT_OUT` fail as if not installed (``None`` in ``sys.modules``
    is Python's way to say so), unless something imported them already."""
    for name in KEPT_OUT:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "import of NAME halted"


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand, found without argparse: the first word that is not an option or an option's value."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word == "--config":
            skip = True
            continue
        if word.startswith("-"):
            continue
        return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The ``remoteops-gateway`` command (see ``gateway.cli``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = _command(args)
    if command in _SERVING:
        keep_out_unused()
    early = spawn_early(args) if command == "serve" and "--stdio" in args else EarlyUpstreams()
    try:
        from gateway.cli import main as cli_main

        return cli_main(args, early=early)
    finally:
        early.close()  # whatever the gateway did not take (or a start-up that failed)
