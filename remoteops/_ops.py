"""The facade: ``async with RemoteOps(settings, targets) as ops: await ops.run("web", ["uptime"])``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc

from remoteops._capabilities import PROBE_ARGV, CapabilityCache, parse_df
from remoteops._errors import InvalidRequest, PolicyDenied, ProbeError, RemoteOpsError
from remoteops._exec import Carrier, ExecRequest, RawExec, present
from remoteops._models import (
    Capabilities,
    CarrierState,
    DiagnoseReport,
    DiskUsage,
    ExecResult,
    SectionError,
    TargetIdentity,
    TargetInfo,
    TransportStats,
)
from remoteops._render import validate_request
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.agent.carrier import AgentCarrier
from remoteops.agent.channel import AgentRefused
from remoteops.files.operations import RemoteFiles
from remoteops.files.wire import failure as agent_refusal
from remoteops.privilege.escalator import Escalator, SecretSource, permission_denial, report
from remoteops.privilege.models import PrivilegeMode, PrivilegeReport, PrivilegeSettings, ProviderAttempt
from remoteops.requests import check_time_limit, command_words
from remoteops.ssh.carrier import SshProcessCarrier
from remoteops.ssh.master import Master
from remoteops.ssh.pool import MasterPool
from remoteops.ssh.resolve import IdentityResolver
from remoteops.system.operations import RemoteSystem
from remoteops.systemd.operations import RemoteSystemd

__all__ = ["RemoteOps"]

_MAX_NAMED_TARGETS = 50
"""At most this many configured target names in a ``not_configured`` error."""

_DIAG_LIMIT_S = 20.0


class RemoteOps:
    """Remote operations over the OpenSSH ControlMaster pool. Closing it closes every master it created."""

    def __init__(
        self,
        settings: TransportSettings,
        targets: Iterable[TargetSpec],
        *,
        privilege: PrivilegeSettings | None = None,
    ) -> None:
        self._settings = settings
        self._escalator = Escalator(privilege or PrivilegeSettings(), capabilities=self.capabilities)
        self._targets: dict[str, TargetSpec] = {}
        for target in targets:
            if target.name in self._targets:
                raise ValueError(f"duplicate target name {target.name!r}")
            self._targets[target.name] = target
        self._resolver = IdentityResolver(settings)
        self._caps = CapabilityCache(settings.capability_ttl_s)
        self._tg: anyio.abc.TaskGroup | None = None
        self._pool: MasterPool | None = None
        self._agent: AgentCarrier | None = None
        self._carrier: Carrier | None = None
        self._files = RemoteFiles(self, ceiling_s=settings.exec_timeout_default_s)
        self._system = RemoteSystem(
            self, output_cap_bytes=settings.output_cap_bytes, ceiling_s=settings.exec_timeout_max_s
        )
        self._systemd = RemoteSystemd(self)

    async def __aenter__(self) -> Self:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._pool = MasterPool(self._settings, tg)
        # the agent carrier chooses per target (settings) between its agent channels and the ssh carrier
        self._agent = AgentCarrier(
            self._settings, self._pool, tg, SshProcessCarrier(self._settings, self._pool)
        )
        self._carrier = self._agent
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if self._tg is None or self._pool is None:
            return None
        try:
            if self._agent is not None:
                await self._agent.aclose()  # before the masters their sessions run over
            await self._pool.aclose()
        finally:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(exc_type, exc, tb)
            self._tg = self._pool = self._carrier = self._agent = None
        return None

    # -- helpers ---------------------------------------------------------------------------------------------
    def _ready(self) -> tuple[MasterPool, Carrier]:
        if self._pool is None or self._carrier is None:
            raise RuntimeError("use RemoteOps as an async context manager")
        return self._pool, self._carrier

    def _agent_carrier(self) -> AgentCarrier:
        if self._agent is None:
            raise RuntimeError("use RemoteOps as an async context manager")
        return self._agent

    def target(self, name: str) -> TargetSpec:
        """The configured target, or PolicyDenied (the allow-list is the configured targets)."""
        target = self._targets.get(name)
        if target is None:
            configured = tuple(sorted(self._targets))[:_MAX_NAMED_TARGETS]
            listed = f"configured targets: {', '.join(configured)}" if configured else "none is configured"
            raise PolicyDenied(
                f"target {name!r} is not configured; {listed}",
                target=name,
                reason="not_configured",
                configured=configured,
            )
        return target

    async def identity(self, name: str) -> TargetIdentity:
        return await self._resolver.resolve(self.target(name))

    @property
    def files(self) -> RemoteFiles:
        """Structured file operations (stat, read, write, list, mkdir, move, delete) over the agent."""
        return self._files

    @property
    def system(self) -> RemoteSystem:
        """System inspection (info, processes, ports, disk, GPUs) and identity-checked process signals."""
        return self._system

    @property
    def systemd(self) -> RemoteSystemd:
        """systemd units (status, list, dependencies, actions), the journal and admin transactions."""
        return self._systemd

    async def agent_request(
        self, target: str, kind: int, meta: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One request of the target's agent (``remoteops.agent.program`` kinds); see
        ``AgentCarrier.request``. An ERROR answer is the matching :class:`RemoteOpsError`
        (``remoteops.files.wire.failure``: FileNotFound, FileConflict, ..., else TransportError), never the
        agent's internal exception."""
        spec = self.target(target)
        pool, _ = self._ready()
        try:
            identity = await self._resolver.resolve(spec)
            return await self._agent_carrier().request(spec, identity, kind, meta, data)
        except RemoteOpsError as exc:
            pool.record_failure(exc)
            raise
        except AgentRefused as exc:  # the agent answered: not a transport failure, the pool records none
            raise agent_refusal(target, exc.meta) from None

    def master_channel(
        self, spec: TargetSpec, identity: TargetIdentity
    ) -> AbstractAsyncContextManager[Master | None]:
        """Hold one channel slot of the target's master; yields the master (None: a one-shot connection)."""
        pool, _ = self._ready()
        return pool.channel(spec, identity)

    # -- public API ------------------------------------------------------------------------------------------
    async def list_targets(self) -> list[TargetInfo]:
        pool, _ = self._ready()
        infos: list[TargetInfo] = []
        for target in self._targets.values():
            identity: TargetIdentity | None = None
            error: str | None = None
            try:
                identity = await self._resolver.resolve(target)
            except RemoteOpsError as exc:
                error = f"{type(exc).__name__}: {exc.detail}"
            infos.append(
                TargetInfo(
                    name=target.name,
                    host=target.host,
                    labels=dict(target.labels),
                    identity=identity,
                    identity_error=error,
                    multiplex=pool.state(target, identity),
                )
            )
        return infos

    async def run(
        self,
        target: str,
        argv: Sequence[str] | None = None,
        shell: str | None = None,
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        privilege: PrivilegeMode = "user",
        secrets: SecretSource | None = None,
    ) -> ExecResult:
        """Run ``argv`` (or ``sh -c shell``) on a configured target. Payloads go in ``stdin``, never in argv.

        ``timeout_s`` is the remote time limit (default ``exec_timeout_default_s``, at most
        ``exec_timeout_max_s``); the local ceiling is a little longer and raises CommandTimeout.
        ``privilege``: ``user`` never escalates, ``root`` escalates at once, ``auto`` only after an observed
        permission denial (``remoteops.privilege.escalator``); ``secrets`` answers password providers. The
        result's ``privilege`` report lists every provider attempted.
        """
        raw, privilege_report = await self._exec(
            target, argv, shell, stdin, cwd, env, timeout_s, privilege, secrets
        )
        result = present(target, raw, self._settings.output_cap_bytes)
        if privilege_report is not None:
            result = result.model_copy(update={"privilege": privilege_report})
        return result

    def preferred_provider(self, target: str) -> str | None:
        """The provider that last gave root on ``target`` (the only privilege fact cached; not a secret)."""
        return self._escalator.preferred(target)

    async def exec_raw(
        self,
        target: str,
        argv: Sequence[str] | None = None,
        shell: str | None = None,
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> RawExec:
        """Like :meth:`run`, but the carrier's raw record: output as bytes (head and tail, bounded)."""
        raw, _ = await self._exec(target, argv, shell, stdin, cwd, env, timeout_s, "user", None)
        return raw

    async def _exec(
        self,
        target: str,
        argv: Sequence[str] | None,
        shell: str | None,
        stdin: bytes | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
        timeout_s: float | None,
        privilege: PrivilegeMode,
        secrets: SecretSource | None,
    ) -> tuple[RawExec, PrivilegeReport | None]:
        spec = self.target(target)
        pool, carrier = self._ready()
        words = command_words(argv, shell, target=target)
        limit = self._settings.exec_timeout_default_s if timeout_s is None else timeout_s
        check_time_limit(limit, self._settings.exec_timeout_max_s, target=target)
        try:
            validate_request(words, cwd, env)
        except InvalidRequest as exc:
            exc.target = target
            raise
        request = ExecRequest(
            argv=words,
            time_limit_s=limit,
            stdin=stdin,
            cwd=cwd,
            env=dict(env or {}),
            output_cap_bytes=self._settings.output_cap_bytes,
        )
        try:
            identity = await self._resolver.resolve(spec)
            before: tuple[ProviderAttempt, ...] = ()
            if privilege != "root":
                raw = await carrier.execute(spec, identity, request)
                denial = permission_denial(raw) if privilege == "auto" else None
                if denial is None:
                    none = None if privilege == "user" else report(privilege, None, (), escalated=False)
                    return raw, none
                before = (ProviderAttempt(provider="user", outcome="denied", reason=denial),)
            raw, provider, attempts = await self._escalator.run(
                spec, identity, request, carrier, secrets, before=before
            )
            return raw, report(privilege, provider, attempts, escalated=bool(before))
        except RemoteOpsError as exc:
            pool.record_failure(exc)
            raise

    def _internal_limit(self, wanted_s: float) -> float:
        """The gateway's own probes obey the operator's ceiling too (a ceiling below ``wanted_s`` wins)."""
        return min(wanted_s, self._settings.exec_timeout_max_s)

    async def capabilities(self, name: str, *, refresh: bool = False) -> Capabilities:
        spec = self.target(name)
        identity = await self._resolver.resolve(spec)

        async def probe() -> ExecResult:
            return await self.run(name, PROBE_ARGV, timeout_s=self._internal_limit(30.0))

        carrier = self._agent_carrier()
        if refresh:
            carrier.forget(spec.name)  # a target fixed since its fallback gets the agent again
        caps = await self._caps.get(spec.name, identity, probe, refresh=refresh)
        state = await carrier.settle(spec, identity)  # report where its commands go, not "still booting"
        update = {"carrier": state.carrier, "carrier_reason": state.reason, "agent_build": state.agent_build}
        return caps.model_copy(update=update)

    async def prepare(self, name: str) -> CarrierState:
        """Make a target ready for commands now (master, and the agent where its carrier uses one) instead
        of on first use; returns how its commands will be carried."""
        spec = self.target(name)
        identity = await self._resolver.resolve(spec)
        return await self._agent_carrier().settle(spec, identity)

    async def diagnose(self, name: str) -> DiagnoseReport:
        """Transport, identity, capabilities, disk pressure, failed units; each section degrades alone."""
        spec = self.target(name)
        pool, _ = self._ready()
        errors: dict[str, SectionError] = {}

        def record(section: str, exc: Exception) -> None:
            detail = exc.detail if isinstance(exc, RemoteOpsError) else str(exc)
            errors[section] = SectionError(error=type(exc).__name__, detail=detail[-600:])

        identity: TargetIdentity | None = None
        caps: Capabilities | None = None
        disks: list[DiskUsage] | None = None
        units: list[str] | None = None
        try:
            identity = await self._resolver.resolve(spec)
        except RemoteOpsError as exc:
            record("identity", exc)
        if identity is not None:
            try:
                caps = await self.capabilities(name)
            except RemoteOpsError as exc:
                record("capabilities", exc)
        if caps is not None:
            try:
                result = await self.run(
                    name, ["df", "-P", "-k"], timeout_s=self._internal_limit(_DIAG_LIMIT_S)
                )
                disks = parse_df(result.stdout)
                if result.exit_code != 0 and not disks:
                    raise ProbeError(f"df exited {result.exit_code}", target=name)
            except (RemoteOpsError, ValueError) as exc:
                record("disks", exc)
            if caps.tools.get("systemctl"):
                try:
                    argv = ["systemctl", "--failed", "--no-legend", "--plain", "--no-pager"]
                    result = await self.run(name, argv, timeout_s=self._internal_limit(_DIAG_LIMIT_S))
                    if result.exit_code != 0:
                        raise ProbeError(result.stderr.strip()[-300:] or "systemctl failed", target=name)
                    units = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
                except RemoteOpsError as exc:
                    record("failed_units", exc)
        return DiagnoseReport(
            target=name,
            multiplex=pool.state(spec, identity),
            identity=identity,
            capabilities=caps,
            disks=disks,
            failed_units=units,
            errors=errors,
        )

    def stats(self) -> TransportStats:
        pool, _ = self._ready()
        c = pool.counters
        return TransportStats(
            masters_created=c["masters_created"],
            masters_reused=c["masters_reused"],
            masters_adopted=c["masters_adopted"],
            stale_recovered=c["stale_recovered"],
            fallbacks=c["fallbacks"],
            evictions=c["evictions"],
            live_masters=pool.live_masters(),
            runs=c["runs"],
            failures={k.removeprefix("failure:"): v for k, v in c.items() if k.startswith("failure:")},
            capability_probes=self._caps.probes,
            capability_cache_hits=self._caps.hits,
            control_dir=str(pool.control_dir),
            control_dir_fallback=pool.control_dir_note is not None,
            control_dir_note=pool.control_dir_note,
            carriers={name: self._agent_carrier().state(t) for name, t in self._targets.items()},
        )
