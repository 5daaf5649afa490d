"""Shared pytest configuration: asyncio is the only backend (asyncssh and uvicorn need it), and the real
OpenSSH sshd (tests/fixtures/sshd.py) shared by the remoteops, gateway and privilege tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.sshd import SshdInstance, sshd_unavailable_reason, start_sshd


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
