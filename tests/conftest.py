"""Shared pytest configuration: asyncio is the only backend (asyncssh and uvicorn need it), the real
OpenSSH sshd (tests/fixtures/sshd.py) shared by the remoteops, gateway and privilege tests, and libtmux-mcp on
a private tmux server (tests/fixtures/libtmux.py) for the upstream and gateway relay tests.

Markers follow the fixtures, whoever wrote the test: every test whose fixture closure reaches the ``sshd``
fixture (directly or through other fixtures) gets ``sshd``, and every test reaching a fixture that starts an
upstream server process gets ``slow``; applied here, before ``-m`` selection, so the fast tier
``pytest -m "not sshd and not slow"`` never starts an sshd or an upstream. A test that starts such a process
without these fixtures (a benchmark smoke test, a gateway subprocess) marks itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.fixtures import libtmux
from tests.fixtures.sshd import SshdInstance, sshd_unavailable_reason, start_sshd

pytest_plugins = ["pytester"]  # tests/test_architecture.py runs the marker hook on a scratch suite

SSHD_FIXTURE = "sshd"
# Fixtures that start an upstream MCP server process (a Python interpreter, ~1-3 s each with its imports).
SLOW_FIXTURES = frozenset({"fault", "fault_http", "fault_stdio", "libtmux_url", "tmux_socket"})


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if SSHD_FIXTURE in uses and item.get_closest_marker("sshd") is None:
            item.add_marker(pytest.mark.sshd)
        if uses & SLOW_FIXTURES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshdInstance]:
    """A throwaway sshd on 127.0.0.1 (users ro-plain, ro-sudo, ro-pass, root); skipped when not root."""
    reason = sshd_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with start_sshd() as instance:
        yield instance


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    """A unique ``LIBTMUX_SOCKET``; its tmux server is killed (``tmux -L <socket> kill-server``) after."""
    with libtmux.tmux_socket("pytest-tmux") as name:
        yield name


@pytest.fixture
async def libtmux_url(tmux_socket: str) -> AsyncIterator[str]:
    """libtmux-mcp over streamable HTTP (``fastmcp run``) on ``tmux_socket``, ready; stopped afterwards."""
    async with libtmux.libtmux_http(tmux_socket) as url:
        yield url
