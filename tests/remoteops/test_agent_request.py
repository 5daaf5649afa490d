"""``RemoteOps.agent_request`` is a public seam: an ERROR answer of the agent arrives as the public exception
tree (never the agent channel's internal ``AgentRefused``), and it is not counted as a transport failure. The
file operations (``ops.files``) are one object over that seam. Against the real sshd (user ro-plain)."""

from __future__ import annotations

import anyio
import pytest

from remoteops import FileNotFound, RemoteOps
from remoteops.agent import program as proto
from tests.remoteops.conftest import OpsFactory

pytestmark = [pytest.mark.sshd, pytest.mark.anyio]

MISSING = "/nonexistent-rog-agent-request/file"


async def test_a_refused_agent_request_is_the_public_error_and_no_transport_failure(
    ops_factory: OpsFactory,
) -> None:
    async with ops_factory(carrier="agent") as ops:
        with anyio.fail_after(60), pytest.raises(FileNotFound) as caught:
            await ops.agent_request("plain", proto.STAT, {"path": proto.wire_text(MISSING.encode())})
        assert ops.stats().failures == {}
    assert caught.value.target == "plain"
    assert caught.value.errno == "ENOENT"
    assert caught.value.path == MISSING


def test_the_file_operations_are_one_object_of_the_facade(ops_factory: OpsFactory) -> None:
    ops: RemoteOps = ops_factory()
    assert ops.files is ops.files
