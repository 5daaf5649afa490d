"""The receiving rsync's version decides whether modification times are compared to the nanosecond: an rsync
before 3.1.3 does not know ``-@-1`` (``--modify-window=-1``), which an upload would otherwise send it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from remoteops import RemoteOps, TargetSpec, Transfers, TransferSettings, TransportSettings
from remoteops._capabilities import rsync_version
from tests.fixtures.sshd import SshdInstance


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("rsync  version 3.2.7  protocol version 31", "3.2.7"),
        ("rsync  version v3.2.3  protocol version 31", "3.2.3"),
        ("rsync  version 3.1.2  protocol version 31\n", "3.1.2"),
        ("openrsync: protocol version 29", None),
        ("", None),
        (None, None),
    ],
)
def test_the_rsync_version_is_read_from_the_first_line_of_rsync_version(
    line: str | None, version: str | None
) -> None:
    assert rsync_version(line) == version


@pytest.fixture
def nopy_with_rsync_312(sshd: SshdInstance) -> Iterator[None]:
    """For one test, the ro-nopy login's rsync (sshd's ``SetEnv PATH=<workdir>/nopy-bin``) says it is 3.1.2
    and otherwise is the real rsync."""
    link = sshd.workdir / "nopy-bin" / "rsync"
    points_to = link.readlink()
    link.unlink()
    link.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "rsync  version 3.1.2  protocol version 31"; exit 0; fi\n'
        f'exec {points_to} "$@"\n'
    )
    link.chmod(0o755)
    try:
        yield
    finally:
        link.unlink()
        link.symlink_to(points_to)


@pytest.fixture
async def transfers(sshd: SshdInstance, tmp_path: Path) -> AsyncIterator[Transfers]:
    settings = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    targets = [TargetSpec(name=role, host=sshd.alias(role)) for role in ("plain", "nopy")]
    async with RemoteOps(settings, targets) as ops:
        yield Transfers(ops, settings, TransferSettings(local_roots=(tmp_path,), min_free_bytes=0))


@pytest.mark.sshd
@pytest.mark.anyio
async def test_nanosecond_mtimes_are_asked_only_of_a_receiver_that_knows_them(
    transfers: Transfers, nopy_with_rsync_312: None
) -> None:
    ops = transfers._ops
    assert (await ops.capabilities("nopy")).rsync_version == "3.1.2"
    modern = (await ops.capabilities("plain")).rsync_version
    assert modern is not None
    assert tuple(map(int, modern.split("."))) >= (3, 1, 3)
    assert await transfers._ns_mtimes("plain", up=True)
    assert not await transfers._ns_mtimes("nopy", up=True)  # uploading: the target's rsync receives
    assert await transfers._ns_mtimes("nopy", up=False)  # downloading: this host's rsync receives
    on = transfers._flags(tree=False, down=False, ignore_existing=False, bwlimit=None, ns_mtimes=True)
    off = transfers._flags(tree=False, down=False, ignore_existing=False, bwlimit=None, ns_mtimes=False)
    assert "--modify-window=-1" in on
    assert not any(flag.startswith(("--modify-window", "-@")) for flag in off)
