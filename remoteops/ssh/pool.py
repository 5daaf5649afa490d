"""The ControlMaster pool: one master per resolved identity, started single-flight, bounded, LRU-evicted.

Modes: ``off`` (one ssh connection per call), ``auto`` (use a master; when none can be established fall back
to a one-shot connection, counted), ``required`` (no master -> ConnectError before any remote command starts).
Before a master is reused its child must be alive and its socket must accept a connection; a master idle
longer than ``master_check_idle_s`` also passes the mux alive check (the exchange ``ssh -O check``
makes, done in-process: no ssh process per check). A dead master or stale socket is removed and
a new master started (``stale_recovered``). A per-identity semaphore (``max_channels_per_target``) makes
bursts queue instead of failing against sshd's MaxSessions.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import anyio.abc

from remoteops._errors import AuthError, ConnectError, HostKeyError, RemoteOpsError
from remoteops._models import MultiplexState, TargetIdentity
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.ssh.master import Master

__all__ = ["MasterPool", "choose_control_dir"]

_MAX_SOCKET_PATH = 104  # sun_path is 108 bytes; keep a margin (ssh appends nothing for -S, but be safe)
_NAME_LEN = 16


def _ensure_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path} is not owned by uid {os.getuid()}")
    if st.st_mode & 0o077:
        path.chmod(0o700)


def choose_control_dir(configured: Path | None) -> tuple[Path, str | None]:
    """Return (directory, note); /tmp/rog-<uid> when the configured one would make socket paths too long."""
    fallback = Path(f"/tmp/rog-{os.getuid()}")  # noqa: S108 - private 0700 dir, checked for owner below
    if configured is None:
        _ensure_private_dir(fallback)
        return fallback, None
    directory = configured.expanduser().absolute()
    if len(str(directory)) + 1 + _NAME_LEN > _MAX_SOCKET_PATH:
        _ensure_private_dir(fallback)
        note = f"control_dir {directory} is too long for a unix socket path; using {fallback}"
        return fallback, note
    _ensure_private_dir(directory)
    return directory, None


class MasterPool:
    def __init__(self, settings: TransportSettings, task_group: anyio.abc.TaskGroup) -> None:
        self._settings = settings
        self._tg = task_group
        self.control_dir, self.control_dir_note = choose_control_dir(settings.control_dir)
        self._masters: OrderedDict[str, Master] = OrderedDict()  # LRU order: oldest first
        self._locks: dict[str, anyio.Lock] = {}
        self._sems: dict[str, anyio.Semaphore] = {}
        self._failed_at: dict[str, float] = {}
        self._starting = 0  # masters being started (not in _masters yet): they count against max_masters
        self.counters: Counter[str] = Counter()
        # Set by the agent carrier: when every slot of an identity is taken, an idle agent channel on it
        # (no request in flight) closes and gives its slot back, instead of holding it for agent_idle_s.
        self.reclaim: Callable[[str], Awaitable[None]] | None = None

    def key_for(self, target: TargetSpec, identity: TargetIdentity) -> str:
        raw = f"{identity.identity_hash}|{target.host_key_policy}|{self._settings.ssh_binary}"
        return hashlib.sha256(raw.encode()).hexdigest()[:_NAME_LEN]

    def semaphore(self, key: str) -> anyio.Semaphore:
        sem = self._sems.get(key)
        if sem is None:
            sem = self._sems[key] = anyio.Semaphore(self._settings.max_channels_per_target)
        return sem

    def live_masters(self) -> int:
        return sum(1 for m in self._masters.values() if m.proc is None or m.proc.returncode is None)

    def state(self, target: TargetSpec, identity: TargetIdentity | None) -> MultiplexState:
        master = self._masters.get(self.key_for(target, identity)) if identity is not None else None
        if master is None:
            return MultiplexState(mode=self._settings.multiplex)
        return MultiplexState(
            mode=self._settings.multiplex,
            master_alive=master.alive,
            master_pid=master.pid,
            control_path=str(master.control_path),
            channels_in_use=master.active,
            idle_s=round(time.monotonic() - master.last_used, 3),
            adopted=master.adopted,
        )

    @contextlib.asynccontextmanager
    async def channel(self, target: TargetSpec, identity: TargetIdentity) -> AsyncIterator[Master | None]:
        """Hold one channel slot for the target; yield the master to use (None: one-shot connection)."""
        key = self.key_for(target, identity)
        sem = self.semaphore(key)
        if sem.value == 0 and self.reclaim is not None:
            await self.reclaim(key)
        async with sem:
            master = await self._acquire(target, key) if self._settings.multiplex != "off" else None
            if master is None:
                yield None
                return
            master.active += 1
            try:
                yield master
            finally:
                master.active -= 1
                master.last_used = time.monotonic()

    async def _acquire(self, target: TargetSpec, key: str) -> Master | None:
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:  # single flight: concurrent first callers wait for one master start
            await self._expire_idle(keep=key)
            master = self._masters.get(key)
            if master is not None:
                if await self._usable(master):
                    self._masters.move_to_end(key)
                    self.counters["masters_reused"] += 1
                    return master
                self.counters["stale_recovered"] += 1
                await self._discard(key)
            elif self._socket_path(key).exists():
                adopted = Master(key, target, self._socket_path(key), self._settings)
                if adopted.socket_accepts() and await adopted.check():
                    adopted.adopted = True
                    self._masters[key] = adopted
                    self.counters["masters_adopted"] += 1
                    return adopted
                self.counters["stale_recovered"] += 1
                with contextlib.suppress(FileNotFoundError):
                    self._socket_path(key).unlink()
            return await self._create(target, key)

    async def _usable(self, master: Master) -> bool:
        if not master.alive:
            return False
        if time.monotonic() - master.last_checked >= self._settings.master_check_idle_s:
            return await master.check()
        return True

    def _socket_path(self, key: str) -> Path:
        return self.control_dir / key

    async def _create(self, target: TargetSpec, key: str) -> Master | None:
        auto = self._settings.multiplex == "auto"
        failed_at = self._failed_at.get(key)
        if (
            auto
            and failed_at is not None
            and time.monotonic() - failed_at < self._settings.master_retry_after_s
        ):
            self.counters["fallbacks"] += 1
            return None
        # the slot is reserved before anything awaits: concurrent starts of other identities (and evictions
        # in progress) count against max_masters, else a burst of first calls overshoots the cap
        self._starting += 1
        try:
            full = self.live_masters() + self._starting > self._settings.max_masters
            if full and not await self._evict_one():
                if auto:
                    self.counters["fallbacks"] += 1
                    return None
                raise ConnectError(
                    "every master is busy and max_masters is reached",
                    target=target.name,
                    stage="master",
                    reason="pool_exhausted",
                )
            master = Master(key, target, self._socket_path(key), self._settings)
            await master.start(self._tg)
        except (HostKeyError, AuthError):
            raise  # a one-shot connection would fail the same way
        except ConnectError as exc:
            if exc.reason != "multiplex" or not auto:
                raise
            self._failed_at[key] = time.monotonic()
            self.counters["fallbacks"] += 1
            return None
        except OSError as exc:  # ssh binary missing or unusable
            if not auto:
                raise ConnectError(str(exc), target=target.name, stage="master", reason="multiplex") from exc
            self._failed_at[key] = time.monotonic()
            self.counters["fallbacks"] += 1
            return None
        finally:
            self._starting -= 1  # no await until it is in _masters (or gone): never counted twice
        self._failed_at.pop(key, None)
        self._masters[key] = master
        self.counters["masters_created"] += 1
        return master

    async def _evict_one(self) -> bool:
        for key, master in self._masters.items():  # oldest first
            if master.active == 0:
                self.counters["evictions"] += 1
                await self._discard(key)
                return True
        return False

    async def _expire_idle(self, *, keep: str) -> None:
        now = time.monotonic()
        for key, master in list(self._masters.items()):
            if (
                key != keep
                and master.active == 0
                and now - master.last_used > self._settings.control_persist_s
            ):
                await self._discard(key)

    async def _discard(self, key: str) -> None:
        master = self._masters.pop(key, None)
        if master is not None:
            await master.close()

    async def invalidate(self, master: Master) -> None:
        """Called by exec when a master turned out dead mid-use."""
        if self._masters.get(master.key) is master and not master.alive:
            self.counters["stale_recovered"] += 1
            await self._discard(master.key)

    def record_failure(self, error: RemoteOpsError) -> None:
        self.counters[f"failure:{type(error).__name__}"] += 1

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            for key in list(self._masters):
                await self._discard(key)
