"""What a capability may ask of the facade: the narrow protocols :class:`remoteops.RemoteOps` satisfies.

Capability packages (files, tasks, sessions, transfers, forwards) are built on these, never on the facade
itself, so the import direction stays core ← capabilities ← facade (``tests/test_architecture.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from remoteops._models import Capabilities, ExecResult, TargetIdentity
from remoteops._settings import TargetSpec
from remoteops.ssh.master import Master

__all__ = ["AgentRequests", "Runner"]


class Runner(Protocol):
    """Commands on configured targets: the facade's allow-list, identity, exec, capabilities and a channel
    slot of a target's master (for tools that open their own ssh connection over it, rsync)."""

    def target(self, name: str) -> TargetSpec:
        """The configured target, or PolicyDenied."""
        ...

    async def identity(self, name: str) -> TargetIdentity: ...

    async def run(
        self,
        target: str,
        argv: Sequence[str] | None = None,
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult: ...

    async def capabilities(self, name: str) -> Capabilities: ...

    def master_channel(
        self, spec: TargetSpec, identity: TargetIdentity
    ) -> AbstractAsyncContextManager[Master | None]:
        """Hold one channel slot of the target's master; yields the master (None: a one-shot connection)."""
        ...


class AgentRequests(Protocol):
    """Requests of a target's agent (``remoteops.agent.program`` kinds); a refusal is already a
    :class:`remoteops.RemoteOpsError` (never the agent's internal exception)."""

    async def agent_request(
        self, target: str, kind: int, meta: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]: ...
