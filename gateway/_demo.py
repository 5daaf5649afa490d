"""``remoteops-gateway demo``: an embedded SSH target named ``demo`` plus the gateway, zero setup.

The target is an asyncssh server on loopback with fresh keys; the gateway reaches it through the
system's OpenSSH client and a ControlMaster exactly as it reaches a real host (the generated
ssh_config and known_hosts keep host-key checking strict). Commands run as the current user in a
sandbox directory under the state directory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.config import Settings
from remoteops import TargetSpec

__all__ = ["demo_settings"]


@asynccontextmanager
async def demo_settings(settings: Settings, workdir: Path | None) -> AsyncIterator[Settings]:
    """Start the embedded target and yield settings that allow it (as target ``demo``)."""
    from remoteops.embedded import EmbeddedTarget  # here, not at the top: it loads asyncssh (demo only)

    where = workdir or settings.state_dir / "demo"
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    async with EmbeddedTarget(where, alias="demo") as target:
        transport = settings.transport.model_copy(update={"ssh_config_file": target.ssh_config_path})
        transfers = settings.transfers
        if not transfers.local_roots:  # transfers work in the demo with zero setup, inside its directory
            local_root = where / "transfers"
            local_root.mkdir(exist_ok=True, mode=0o700)
            transfers = transfers.model_copy(update={"local_roots": (local_root,)})
        targets = (
            *(t for t in settings.targets if t.name != "demo"),
            TargetSpec(name="demo", host=target.alias),
        )
        yield Settings.model_validate(
            {
                **settings.model_dump(),
                "transport": transport.model_dump(),
                "transfers": transfers.model_dump(),
                "targets": [t.model_dump() for t in targets],
            }
        )
