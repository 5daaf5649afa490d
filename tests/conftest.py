"""Shared pytest configuration: asyncio is the only backend (asyncssh and uvicorn need it), the real
OpenSSH sshd (tests/fixtures/sshd.py) shared by the remoteops, gateway and privilege tests, and libtmux-mcp on
a private tmux server (tests/fixtures/libtmux.py) for the upstream and gateway relay tests.

Every test whose fixture closure reaches the ``sshd`` fixture — directly or through other fixtures — gets
the ``sshd`` marker here, before ``-m`` selection, whoever wrote it: ``-m "not sshd"`` never starts an sshd.
(A test that starts an sshd without the fixture, e.g. a benchmark smoke test, still marks itself.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.fixtures import libtmux
from tests.fixtures.sshd import SshdInstance, sshd_unavailable_reason, start_sshd

pytest_plugins = ["pytester"]  # tests/test_architecture.py runs the marker hook on a scratch suite

SSHD_FIXTURE = "sshd"


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SSHD_FIXTURE in getattr(item, "fixturenames", ()) and item.get_closest_marker("sshd") is None:
            item.add_marker(pytest.mark.sshd)


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
