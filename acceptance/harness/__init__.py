"""The processes the acceptance phases, the benchmarks and the test suite start and stop: a throwaway
OpenSSH sshd, libtmux-mcp, the gateway as a subprocess, npm MCP clients, headless Chromium, a systemd
target, an OAuth issuer, plus bounded stop-and-reap and leftover checks. The test suite imports these from
here (``tests/fixtures/*`` alias them), never the other way: tests → acceptance → product.

Each helper that starts a real process is tagged with :func:`starts` and the kind of thing it starts; the
test suite's collection hook (tests/conftest.py) reads the tag to put every test that reaches the helper —
through a fixture or by calling it — into the right tier, and tests/test_architecture.py checks that every
process-starting helper here carries a tag."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

__all__ = ["STARTS_ATTR", "Starts", "starts"]

# What a tagged helper starts: a real third-party server or program (system tier: sshd, gateway subprocess,
# libtmux-mcp upstream, tmux, Chromium, npm clients, systemd, a container engine, or a "command" run to
# completion on this machine as a target's user), or the project's own fault upstream (component tier).
Starts = Literal[
    "sshd", "gateway", "upstream", "tmux", "browser", "node", "systemd", "container", "command", "fault"
]
STARTS_ATTR = "__harness_starts__"
_T = TypeVar("_T")


def starts(kind: Starts) -> Callable[[_T], _T]:
    """Tag a helper (function, context manager or class) as starting a ``kind`` process."""

    def tag(helper: _T) -> _T:
        setattr(helper, STARTS_ATTR, kind)
        return helper

    return tag
