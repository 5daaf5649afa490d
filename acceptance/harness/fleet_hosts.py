"""Many distinct targets from a few throwaway sshds, and a really full file system, for the fleet tests
and ``acceptance/bench_fleet.py``.

:func:`write_fleet_config` writes one ssh client configuration holding ``count`` aliases per sshd
(``fleet-000`` …). Each alias has its own ``HostKeyAlias`` (and a known_hosts line for it), so ``ssh -G``
resolves each to a different identity: the pool gives each its own ControlMaster and the agent carrier
its own agent, exactly as for different hosts. Host keys are still verified (strict checking against the
sshd's real key).

:func:`full_filesystem` mounts a small tmpfs (``mount -t tmpfs -o size=…``) that a test fills to the last
byte: writes into it fail with ENOSPC for real. Unmounted and removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from acceptance.harness import starts
from acceptance.harness.sshd import SshdInstance

__all__ = ["FleetHosts", "full_filesystem", "write_fleet_config"]


@dataclass(frozen=True)
class FleetHosts:
    ssh_config: Path
    known_hosts: Path
    aliases: tuple[str, ...]
    by_sshd: tuple[tuple[str, ...], ...]  # the aliases of each sshd, in the order given


def write_fleet_config(
    directory: Path,
    sshds: Sequence[SshdInstance],
    count: int,
    *,
    role: str = "plain",
    prefix: str = "fleet",
    include: Path | None = None,
) -> FleetHosts:
    """``count`` aliases per sshd (numbered across all of them), logging in as ``role``'s user;
    ``include``: another client configuration whose aliases stay usable (an sshd's ``ssh_config``)."""
    known = directory / "fleet_known_hosts"
    blocks: list[str] = [f"Include {include}\n"] if include is not None else []
    keys: list[str] = []
    groups: list[tuple[str, ...]] = []
    number = 0
    for sshd in sshds:
        key_type, key_b64 = (sshd.workdir / "host_ed25519.pub").read_text().split()[:2]
        names = []
        for _ in range(count):
            alias = f"{prefix}-{number:03d}"
            number += 1
            names.append(alias)
            keys.append(f"{alias} {key_type} {key_b64}")
            blocks.append(
                f"Host {alias}\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.users[role]}\n"
                f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  HostKeyAlias {alias}\n"
                f"  UserKnownHostsFile {known}\n  GlobalKnownHostsFile /dev/null\n"
            )
        groups.append(tuple(names))
    known.write_text("\n".join(keys) + "\n")
    config = directory / "fleet_ssh_config"
    config.write_text("\n".join(blocks))
    return FleetHosts(config, known, tuple(n for g in groups for n in g), tuple(groups))


@starts("command")
@contextlib.contextmanager
def full_filesystem(at: Path | None = None, size_kib: int = 256) -> Iterator[Path]:
    """A tmpfs of ``size_kib`` KiB, world-writable, filled completely: any new data written into it fails
    with ENOSPC. Mounted on ``at`` (created, and removed afterwards; it must not exist), else on a new
    directory under /tmp. Raises ``OSError`` where mounting is not allowed (the caller skips with the
    reason)."""
    if at is None:
        mount_point = Path(tempfile.mkdtemp(prefix="rogfull-", dir="/tmp"))
    else:
        at.mkdir(mode=0o755)
        mount_point = at
    mounted = False
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=1777", "tmpfs", str(mount_point)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}")
        mounted = True
        filler = mount_point / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as fh:  # stops at ENOSPC, by design
            block = b"\0" * 4096
            for _ in range(size_kib // 4 + 16):
                fh.write(block)
                fh.flush()
        os.chmod(mount_point, 0o1777)  # noqa: S103 - any target user writes (and fails) there
        yield mount_point
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=10, check=False)
        with contextlib.suppress(OSError):
            mount_point.rmdir()
