"""Managed SSH port forwards: create (confirmed, then recorded), list, status, close, adopt after restart.

::

    async with ForwardManager(ops, transport, ForwardSettings(), store, log_dir) as forwards:
        created = await forwards.create(ForwardSpec(target="web", kind="local", dest_host="127.0.0.1",
                                                    dest_port=5432), name="db")
        await forwards.status(created.forward.id)
        await forwards.close(created.forward.id)

* A record is written only after the start is confirmed and the process identity captured
  (``_forward_proc``); a start that fails leaves nothing running and nothing recorded.
* Names: ``create`` with the name of a healthy forward of the same specification returns it
  (``reused``); the same name with another specification is a :class:`ForwardConflict` while that
  forward is active; a named forward that is lost (its process gone) or fails its health check is
  stopped and replaced by a fresh one.
* Entering the manager adopts every recorded forward whose process runs with the recorded identity and
  marks the others ``lost`` (``lost_reason``); nothing is restarted, so nothing is duplicated.
* Leaving the manager (the gateway shutting down, gracefully or not) leaves forwards running: they are
  long-lived by design and the next gateway adopts them. ``forward_close`` is the way to stop one.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import anyio

from remoteops._errors import PolicyDenied, TransportLost
from remoteops._settings import TransportSettings
from remoteops.forwards.errors import ForwardConflict, ForwardNotFound, ForwardStartFailed
from remoteops.forwards.health import check_forward
from remoteops.forwards.models import (
    ForwardClosed,
    ForwardCreated,
    ForwardRecord,
    ForwardSettings,
    ForwardSpec,
    ForwardView,
    is_loopback,
)
from remoteops.forwards.proc import (
    ForwardArgs,
    find_by_argv,
    identity_alive,
    identity_of,
    launch,
    stop_process,
)
from remoteops.ssh.args import classify_ssh_failure, tail_lines

if TYPE_CHECKING:
    from remoteops._runner import Runner

__all__ = ["ForwardManager", "ForwardStore"]

_ALLOCATED = re.compile(r"Allocated port (\d+) for remote forward")
_PORT_IN_USE = ("Address already in use", "cannot listen to port", "Could not request local forwarding")
_REMOTE_REFUSED = ("remote port forwarding failed",)


class ForwardStore(Protocol):
    """Where forward records live (the gateway's state store)."""

    async def open(self) -> None: ...
    async def load_all(self) -> dict[str, ForwardRecord]: ...
    async def put(self, record: ForwardRecord) -> None: ...
    async def delete(self, forward_id: str) -> bool: ...


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _free_port(address: str) -> int:
    host = address.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1" if host == "localhost" else host, 0))
        return int(sock.getsockname()[1])


def _read_log(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return


class ForwardManager:
    def __init__(
        self,
        ops: Runner,
        transport: TransportSettings,
        settings: ForwardSettings,
        store: ForwardStore,
        log_dir: Path,
    ) -> None:
        self._ops = ops
        self._args = ForwardArgs(transport)
        self._settings = settings
        self._store = store
        self._log_dir = log_dir
        self._records: dict[str, ForwardRecord] = {}
        self._adopted: set[str] = set()
        self._lock = anyio.Lock()
        self.counters: Counter[str] = Counter()

    async def __aenter__(self) -> Self:
        self._log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._log_dir, 0o700)
        await self._store.open()
        await self.recover()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None  # forwards outlive the gateway by design (see the module docstring)

    # -- recovery -------------------------------------------------------------------------------------------
    async def recover(self) -> None:
        """Adopt recorded forwards that still run with their recorded identity; mark the rest lost."""
        async with self._lock:
            for forward_id, record in (await self._store.load_all()).items():
                if record.state == "active":
                    alive = identity_alive(record.process)
                    if alive is True:
                        if record.gateway_pid != os.getpid():
                            self._adopted.add(forward_id)
                            self.counters["adopted"] += 1
                    else:
                        reason = "process_gone" if alive is False else "identity_mismatch"
                        record = record.model_copy(update={"state": "lost", "lost_reason": reason})
                        await self._store.put(record)
                        self.counters["lost_at_start"] += 1
                self._records[forward_id] = record

    # -- helpers --------------------------------------------------------------------------------------------
    def _view(self, record: ForwardRecord) -> ForwardView:
        return ForwardView.of(record, adopted=record.id in self._adopted)

    def _get(self, forward_id: str) -> ForwardRecord:
        record = self._records.get(forward_id)
        if record is None:
            raise ForwardNotFound(f"no forward {forward_id!r}", forward_id=forward_id)
        return record

    def target_of(self, forward_id: str) -> str:
        """The target a known forward goes through, from its record (nothing is checked)."""
        return self._get(forward_id).spec.target

    def _check_bind(self, spec: ForwardSpec) -> None:
        if is_loopback(spec.bind_address) or spec.bind_address in self._settings.allowed_bind_addresses:
            return
        raise PolicyDenied(
            f"bind address {spec.bind_address} is not loopback and not in forwards.allowed_bind_addresses",
            target=spec.target,
            reason="bind_not_allowed",
        )

    async def _mark_lost(self, record: ForwardRecord, reason: str) -> ForwardRecord:
        if record.state == "lost":
            return record
        record = record.model_copy(update={"state": "lost", "lost_reason": reason})
        await self._store.put(record)
        self._records[record.id] = record
        self.counters["lost"] += 1
        return record

    async def _refresh(self, record: ForwardRecord) -> ForwardRecord:
        alive = identity_alive(record.process)
        if record.state == "active" and alive is not True:
            return await self._mark_lost(record, "process_gone" if alive is False else "identity_mismatch")
        return record

    # -- public API -----------------------------------------------------------------------------------------
    async def create(self, spec: ForwardSpec, *, name: str | None = None) -> ForwardCreated:
        target = self._ops.target(spec.target)  # PolicyDenied for a target that is not configured
        self._check_bind(spec)
        async with self._lock:
            if name is not None:
                reused = await self._reuse(spec, name)
                if reused is not None:
                    return reused
            record = await self._start(target, spec, name)
            self._records[record.id] = record
            self.counters["created"] += 1
            return ForwardCreated(forward=self._view(record), reused=False)

    async def _reuse(self, spec: ForwardSpec, name: str) -> ForwardCreated | None:
        existing = next((r for r in self._records.values() if r.name == name), None)
        if existing is None:
            return None
        existing = await self._refresh(existing)
        if existing.spec != spec and existing.state == "active":
            raise ForwardConflict(
                f"forward name {name!r} is taken by {existing.id} with another specification",
                target=spec.target,
                forward_id=existing.id,
            )
        if existing.state == "active" and existing.spec == spec:
            health = await check_forward(self._ops, existing, limit_s=self._settings.check_timeout_s)
            existing = existing.model_copy(update={"last_health": health})
            await self._store.put(existing)
            self._records[existing.id] = existing
            if health.healthy:
                self.counters["reused"] += 1
                return ForwardCreated(forward=self._view(existing), reused=True)
        await self._discard(existing)  # dead or unhealthy: replaced by a fresh one under the same name
        return None

    async def _discard(self, record: ForwardRecord) -> ForwardClosed:
        outcome = await stop_process(record.process, grace_s=self._settings.close_grace_s)
        removed = outcome != "survived"
        if removed:
            await self._store.delete(record.id)
            self._records.pop(record.id, None)
            self._adopted.discard(record.id)
            _remove(Path(record.log_path))
        return ForwardClosed(
            id=record.id,
            state_before=record.state,
            outcome=outcome,
            signalled=outcome in ("terminated", "killed", "survived"),
            record_removed=removed,
        )

    async def _start(self, target: Any, spec: ForwardSpec, name: str | None) -> ForwardRecord:
        forward_id = f"fwd-{secrets.token_hex(6)}"
        if spec.bind_port is not None:
            bind_port = spec.bind_port
        else:
            bind_port = 0 if spec.kind == "remote" else _free_port(spec.bind_address)
        log_path = self._log_dir / f"{forward_id}.log"
        argv = self._args.forward(target, spec, bind_port, log_path)
        try:
            with anyio.fail_after(self._settings.start_timeout_s):
                returncode = await launch(argv)
        except TimeoutError:
            _remove(log_path)
            raise ForwardStartFailed(
                f"ssh did not confirm the forward within {self._settings.start_timeout_s} s",
                target=spec.target,
                forward_id=forward_id,
                reason="timeout",
            ) from None
        log = _read_log(log_path)
        if returncode != 0:
            _remove(log_path)
            raise self._start_error(log, spec, forward_id, returncode)
        pids = await anyio.to_thread.run_sync(find_by_argv, argv)
        identity = identity_of(pids[0]) if len(pids) == 1 else None
        if spec.kind == "remote" and bind_port == 0:
            match = _ALLOCATED.search(log)
            bind_port = int(match.group(1)) if match else 0
        if identity is None or bind_port == 0:
            for pid in pids:
                leftover = identity_of(pid)
                if leftover is not None:
                    await stop_process(leftover, grace_s=self._settings.close_grace_s)
            _remove(log_path)
            raise ForwardStartFailed(
                "the forward's ssh confirmed its start but could not be identified afterwards "
                f"({len(pids)} matching processes); {tail_lines(log) or 'its log is empty'}",
                target=spec.target,
                forward_id=forward_id,
                reason="exited",
            )
        record = ForwardRecord(
            id=forward_id,
            name=name,
            spec=spec,
            bind_port=bind_port,
            process=identity,
            log_path=str(log_path),
            created_at=_now(),
            gateway_pid=os.getpid(),
        )
        try:
            await self._store.put(record)
        except BaseException:
            await stop_process(identity, grace_s=self._settings.close_grace_s)  # never run unrecorded
            _remove(log_path)
            raise
        return record

    @staticmethod
    def _start_error(log: str, spec: ForwardSpec, forward_id: str, returncode: int) -> Exception:
        detail = tail_lines(log) or f"ssh exited {returncode}"
        if any(text in log for text in _PORT_IN_USE):
            return ForwardStartFailed(detail, target=spec.target, forward_id=forward_id, reason="port_in_use")
        if any(text in log for text in _REMOTE_REFUSED):
            return ForwardStartFailed(
                detail, target=spec.target, forward_id=forward_id, reason="remote_refused"
            )
        error = classify_ssh_failure(log, target=spec.target, stage="forward", command_started=False)
        if isinstance(error, TransportLost):  # nothing ssh said matched a known failure
            return ForwardStartFailed(detail, target=spec.target, forward_id=forward_id, reason="exited")
        return error

    async def list(self) -> list[ForwardView]:
        async with self._lock:
            records = [await self._refresh(r) for r in list(self._records.values())]
        return [self._view(r) for r in sorted(records, key=lambda r: r.created_at)]

    async def status(self, forward_id: str) -> ForwardView:
        async with self._lock:
            record = await self._refresh(self._get(forward_id))
            health = await check_forward(self._ops, record, limit_s=self._settings.check_timeout_s)
            record = record.model_copy(update={"last_health": health})
            await self._store.put(record)
            self._records[record.id] = record
        return self._view(record)

    async def close(self, forward_id: str) -> ForwardClosed:
        async with self._lock:
            closed = await self._discard(self._get(forward_id))
        self.counters["closed"] += 1
        return closed

    def stats(self) -> dict[str, Any]:
        states = Counter(r.state for r in self._records.values())
        return {
            "active": states["active"],
            "lost": states["lost"],
            "adopted": len(self._adopted),
            "counters": dict(self.counters),
        }
