"""Fixtures for remoteops tests against the real sshd (tests/fixtures/sshd.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from remoteops import RemoteOps, TargetSpec, TransportSettings
from tests.fixtures.sshd import SshdInstance

# roles of tests/fixtures/sshd.py aliases that remoteops tests use as target names
ROLES = ("plain", "sudo", "pass", "root", "badhostkey", "wrongkey", "closed")

OpsFactory = Callable[..., AbstractAsyncContextManager[RemoteOps]]


def make_targets(sshd: SshdInstance) -> list[TargetSpec]:
    return [TargetSpec(name=role, host=sshd.alias(role)) for role in ROLES]


@pytest.fixture
def settings(sshd: SshdInstance) -> TransportSettings:
    return TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)


@pytest.fixture
def ops_factory(sshd: SshdInstance, settings: TransportSettings) -> OpsFactory:
    """RemoteOps over the fixture sshd; keyword arguments override TransportSettings fields."""

    def factory(targets: list[TargetSpec] | None = None, **overrides: Any) -> RemoteOps:
        merged = settings.model_copy(update=overrides) if overrides else settings
        return RemoteOps(TransportSettings.model_validate(merged.model_dump()), targets or make_targets(sshd))

    return factory


@pytest.fixture
def portal_ops(ops_factory: OpsFactory) -> Iterator[tuple[BlockingPortal, RemoteOps]]:
    """One RemoteOps (one master) living in a portal thread, for sync tests such as hypothesis properties."""
    with start_blocking_portal("asyncio") as portal, portal.wrap_async_context_manager(ops_factory()) as ops:
        yield portal, ops


async def wait_for_line(path: Path) -> str:
    """Block until a writer opens the FIFO at ``path`` and writes a line (no polling); what it wrote up to
    its end when it closes without a newline.

    Readiness on a non-blocking read end, not a blocking ``open`` in a worker thread: a test cancelled (or
    failed) before any writer came would leave that thread blocked in ``open`` for good, and the
    interpreter waits for it at exit — one failure would hang the whole run instead of being reported."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # returns at once; readable once a writer wrote
    try:
        data = b""
        while not data.endswith(b"\n"):
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:  # the writer closed
                break
            data += chunk
        return data.decode()
    finally:
        os.close(fd)
