"""The runtime: everything a request handler needs, entered once and passed down as one typed object.

It owns the catalog, the redactor, the audit log, the remote-operations facade and the upstream relay.
Identity that cannot change for the life of the process (version, pid, the start time) is
snapshotted here once, never re-read per call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Self

from gateway._catalog import AnySpec, Catalog, Toolset, build_catalog
from gateway._early import EarlyUpstreams
from gateway._redact import Redactor
from gateway._version import __version__
from gateway.approvals.hub import ApprovalHub
from gateway.audit.log import AuditLog
from gateway.config import Settings
from gateway.mcptasks import McpTasks
from gateway.relay.tools import Relay
from gateway.secrets.broker import SecretBroker
from gateway.secrets.listener import LoopbackListener
from remoteops import (
    ForwardManager,
    RemoteOps,
    RemoteSessions,
    RemoteTasks,
    StateForwardStore,
    StateStore,
    Transfers,
)

if TYPE_CHECKING:
    from gateway.audit.ship import AuditShipper

__all__ = ["Identity", "Runtime"]


@dataclass(frozen=True)
class Identity:
    """Facts about this gateway process, snapshotted at startup."""

    version: str
    pid: int
    started_at: str
    started_monotonic: float


def _shipper(settings: Settings, redactor: Redactor) -> AuditShipper | None:
    if not settings.audit.ship.url:
        return None
    from gateway.audit.ship import build_shipper  # tenacity and httpx only when shipping is configured

    return build_shipper(settings, redactor)


class Runtime:
    def __init__(
        self,
        settings: Settings,
        specs: Sequence[AnySpec],
        *,
        redactor: Redactor | None = None,
        clock: Callable[[], float] = time.monotonic,
        early: EarlyUpstreams | None = None,
    ) -> None:
        """``clock`` (monotonic seconds) measures lifetimes: the one-time links, the entered passwords and
        the approvals. ``early``: stdio upstreams started before the imports (``gateway._early``), for the
        relay."""
        self.settings = settings
        # Fail closed before anything starts: unclassified tools, unknown toolsets or names stop here.
        self.catalog: Catalog = build_catalog(
            specs,
            toolsets=settings.tools.toolsets,
            include=settings.tools.include,
            exclude=settings.tools.exclude,
            settings=settings,
        )
        self.redactor = redactor or Redactor()
        self.identity = Identity(
            version=__version__,
            pid=os.getpid(),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            started_monotonic=time.monotonic(),
        )
        self.audit = AuditLog(
            settings.audit_path,
            max_bytes=settings.audit.max_bytes,
            backups=settings.audit.backups,
            redactor=self.redactor,
            shipper=_shipper(settings, self.redactor),
            key_file=settings.audit_key_path,
            head_file=settings.state_dir / "audit.head",
            create_key=settings.audit.key_file is None,
        )
        self.remote = RemoteOps(settings.transport, settings.targets, privilege=settings.root)
        # passwords for root: entered on a one-time page (the HTTP listener, else a loopback one)
        self.secrets = SecretBroker(settings.root, self.redactor, clock=clock)
        self.secret_listener = LoopbackListener(self.secrets, settings.root.entry_port)
        self.secrets.open_with(self.secret_listener.start)
        # calls matching [[approvals.rules]] wait here for a human operator (pages: gateway.console)
        self.approvals = ApprovalHub(settings.approvals.timeout_s, clock=clock)
        self.approvals.open_with(self.secret_listener.start)
        self.state = StateStore(settings.state_dir)
        self.tasks = RemoteTasks(self.remote, self.state, settings.tasks, settings.transport)
        self.mcp_tasks = McpTasks(
            self.state,
            settings.mcp_tasks,
            self.tasks,
            self.audit,
            output_cap_bytes=settings.transport.output_cap_bytes,
        )
        self.sessions = RemoteSessions(self.remote, self.state, settings.sessions, settings.transport)
        self.transfers = Transfers(self.remote, settings.transport, settings.transfers)
        self.forwards = ForwardManager(
            self.remote,
            settings.transport,
            settings.forwards,
            StateForwardStore(self.state),
            settings.state_dir / "forward-logs",
        )
        self.relay = Relay(
            settings.upstreams,
            own_names=frozenset(self.catalog.enabled),
            enabled="upstream" in settings.tools.toolsets,
            redactor=self.redactor,
            early=early,
        )
        self._stack: AsyncExitStack | None = None
        self._on_stop: list[Callable[[], None]] = []

    def on_stop(self, callback: Callable[[], None]) -> None:
        """``callback()`` once, when serving stops (before the runtime closes): long-lived streams end."""
        self._on_stop.append(callback)

    def stopping(self) -> None:
        """Serving stops: tell whoever asked (the console's live streams), once."""
        callbacks, self._on_stop = self._on_stop, []
        for callback in callbacks:
            callback()

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.audit)  # first in, last out: shutdown calls are audited
            await stack.enter_async_context(self.secrets)  # wipes what is left, after the listener closed
            await stack.enter_async_context(self.secret_listener)
            await stack.enter_async_context(self.remote)
            await stack.enter_async_context(self.tasks)
            await stack.enter_async_context(self.mcp_tasks)  # after the remote tasks it watches
            await stack.enter_async_context(self.sessions)
            await stack.enter_async_context(self.forwards)
            await stack.enter_async_context(self.relay)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopping()
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def uptime_s(self) -> float:
        return time.monotonic() - self.identity.started_monotonic

    def describe(
        self, *, toolsets: frozenset[str] | None = None, targets: frozenset[str] | None = None
    ) -> str:
        """The MCP ``instructions``: what the agent is connected to, from the objects the tools use;
        ``toolsets``/``targets`` narrow them to what the caller's policy reaches (None: everything)."""
        enabled = sorted(t.value for t in self.catalog.toolsets if toolsets is None or t.value in toolsets)
        lines = [
            f"remoteops-gateway {self.identity.version}: OpenSSH remote operations, relayed terminal tools.",
            f"Enabled toolsets: {', '.join(enabled)}.",
        ]
        off = sorted(t.value for t in Toolset if t not in self.catalog.toolsets)
        if off and toolsets is None:
            lines.append(
                f"Toolsets not enabled (their tools are neither listed nor run; the operator enables them "
                f"in tools.toolsets): {', '.join(off)}."
            )
        names = [t.name for t in self.settings.targets if targets is None or t.name in targets]
        if names:
            lines.append(f"Targets you may use (the only ones allowed): {', '.join(names)}.")
        else:
            none = "No SSH targets are configured." if targets is None else "No SSH target is open to you."
            lines.append(none)
        if toolsets is None or "upstream" in toolsets:
            lines.extend(self.relay.describe())
        lines.append(
            'Tool failures are isError results whose text is JSON {"error": {code, message, retryable, '
            "details}}; transport_lost and upstream_ambiguous mean the action may or may not have run."
        )
        return "\n".join(lines)
