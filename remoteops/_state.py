"""The gateway's atomic state store: versioned pydantic records, one file each, under a private directory.

Layout: ``<root>/<kind>/<id>.json`` holding ``{"kind": ..., "version": N, "record": {...}}``; ``root`` is
0700 and every file 0600. Rules:

* **Atomic writes.** Each write goes to a temporary file in the same directory, is fsynced, renamed over the
  old file and the directory is fsynced: a writer killed at any moment leaves the old record or the new one.
  :func:`atomic_write` is the same primitive for other files (the bearer token, the ready file).
* **One writer at a time.** Every mutation holds ``fcntl.flock`` on ``<root>/.lock`` (across processes and
  threads); the blocking parts run in a worker thread, never on the event loop.
* **Nothing silently dropped.** A record that does not parse (truncated, not JSON, wrong kind, unknown
  version, fields that do not validate) is renamed to ``<id>.json.corrupt-<utc timestamp>`` and listed in
  :attr:`StateStore.problems` (shown by ``gateway_health``); loading never raises for a bad record.
  Temporary files left by a killed writer are removed when the store opens.

A record type is a :class:`Collection`: a kind name, the model, the current version and migrations from
older versions (``{1: upgrade_v1_to_v2, ...}``), so sessions and forwards add theirs without touching this
module.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "Collection",
    "StateProblem",
    "StateStore",
    "atomic_write",
]

R = TypeVar("R", bound=BaseModel)
Migration = Callable[[dict[str, Any]], dict[str, Any]]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_TMP_PREFIX = ".tmp-"
_LOCK_NAME = ".lock"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, replace: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same directory, fsync, rename, dir fsync.

    With ``replace=False`` the file is created only if absent (``FileExistsError`` otherwise), still
    atomically: the complete temp file is hard-linked into place, so no reader ever sees a partial file.
    """
    directory = path.parent
    tmp = directory / f"{_TMP_PREFIX}{path.name}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not loosen or tighten what was asked for
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            tmp.unlink()
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


class StateProblem(BaseModel):
    """A record that could not be loaded; the file was moved aside (``moved_to``), never deleted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    record_id: str
    path: str
    moved_to: str | None  # None: the file could not be moved either (``detail`` says why)
    reason: str  # "unreadable" | "not_json" | "bad_envelope" | "wrong_kind" | "unknown_version" | "invalid"
    detail: str
    at: str


@dataclass(frozen=True)
class Collection(Generic[R]):
    """One record type in the store. ``migrations[v]`` turns a version-``v`` record into version ``v + 1``."""

    kind: str
    model: type[R]
    version: int = 1
    migrations: Mapping[int, Migration] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _KIND.fullmatch(self.kind):
            raise ValueError(f"invalid collection kind {self.kind!r}")
        if self.version < 1:
            raise ValueError("version must be >= 1")

    def decode(self, raw: bytes) -> R:
        """Parse one file's bytes; raises :class:`_Unloadable` with a reason."""
        try:
            envelope = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Unloadable("not_json", str(exc)) from None
        if not isinstance(envelope, dict) or not {"kind", "version", "record"} <= envelope.keys():
            raise _Unloadable("bad_envelope", "expected an object with kind, version and record")
        if envelope["kind"] != self.kind:
            raise _Unloadable("wrong_kind", f"kind {envelope['kind']!r} in the {self.kind!r} collection")
        version, data = envelope["version"], envelope["record"]
        if not isinstance(version, int) or not isinstance(data, dict):
            raise _Unloadable("bad_envelope", "version must be an integer and record an object")
        if not 1 <= version <= self.version:
            raise _Unloadable("unknown_version", f"version {version}; this gateway reads 1..{self.version}")
        while version < self.version:
            migrate = self.migrations.get(version)
            if migrate is None:
                raise _Unloadable("unknown_version", f"no migration from version {version}")
            data, version = migrate(data), version + 1
        try:
            return self.model.model_validate(data)
        except ValidationError as exc:
            raise _Unloadable("invalid", str(exc)[:600]) from None

    def encode(self, record: R) -> bytes:
        envelope = {"kind": self.kind, "version": self.version, "record": record.model_dump(mode="json")}
        return json.dumps(envelope, separators=(",", ":"), sort_keys=True).encode()


class _Unloadable(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _check_id(record_id: str) -> str:
    if not _ID.fullmatch(record_id):
        raise ValueError(f"invalid record id {record_id!r}")
    return record_id


def _ensure_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


class StateStore:
    """Records under ``root`` (the gateway's ``state_dir``). Thread- and process-safe writers (flock).

    Sync methods (``*_sync``) block and are for worker threads and other processes; the async methods run
    them in a worker thread. :attr:`problems` lists every record moved aside since this store was created.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[StateProblem] = []
        self._opened = False

    # -- sync core (runs in worker threads) ---------------------------------------------------------------
    def open_sync(self) -> None:
        _ensure_private_dir(self.root)
        lock = self.root / _LOCK_NAME
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        with self._locked():
            for directory in [self.root, *[p for p in self.root.iterdir() if p.is_dir()]]:
                for leftover in directory.glob(f"{_TMP_PREFIX}*"):
                    with contextlib.suppress(FileNotFoundError):
                        leftover.unlink()  # a writer died before its rename: the old file is intact
        self._opened = True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / _LOCK_NAME, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _dir(self, kind: str) -> Path:
        if not self._opened:
            raise RuntimeError("open the StateStore first")
        directory = self.root / kind
        _ensure_private_dir(directory)
        return directory

    def put_sync(self, collection: Collection[R], record_id: str, record: R) -> None:
        path = self._dir(collection.kind) / f"{_check_id(record_id)}.json"
        data = collection.encode(record)
        with self._locked():
            atomic_write(path, data)

    def update_sync(
        self, collection: Collection[R], record_id: str, change: Callable[[R | None], R | None]
    ) -> R | None:
        """Read-modify-write under the lock: ``change(current)`` returns the new record (None deletes)."""
        path = self._dir(collection.kind) / f"{_check_id(record_id)}.json"
        with self._locked():
            current = self._read(collection, record_id, path)
            new = change(current)
            if new is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    _fsync_dir(path.parent)
            else:
                atomic_write(path, collection.encode(new))
            return new

    def delete_sync(self, collection: Collection[R], record_id: str) -> bool:
        path = self._dir(collection.kind) / f"{_check_id(record_id)}.json"
        with self._locked():
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            _fsync_dir(path.parent)
            return True

    def get_sync(self, collection: Collection[R], record_id: str) -> R | None:
        path = self._dir(collection.kind) / f"{_check_id(record_id)}.json"
        with self._locked():
            return self._read(collection, record_id, path)

    def load_all_sync(self, collection: Collection[R]) -> dict[str, R]:
        """Every loadable record of the collection; the others are moved aside and reported."""
        directory = self._dir(collection.kind)
        out: dict[str, R] = {}
        with self._locked():
            for path in sorted(directory.glob("*.json")):
                record_id = path.name.removesuffix(".json")
                if not _ID.fullmatch(record_id):
                    self._quarantine(collection.kind, record_id, path, "bad_envelope", "invalid file name")
                    continue
                record = self._read(collection, record_id, path)
                if record is not None:
                    out[record_id] = record
        return out

    def _read(self, collection: Collection[R], record_id: str, path: Path) -> R | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._quarantine(collection.kind, record_id, path, "unreadable", str(exc))
            return None
        try:
            return collection.decode(raw)
        except _Unloadable as exc:
            self._quarantine(collection.kind, record_id, path, exc.reason, exc.detail)
            return None

    def _quarantine(self, kind: str, record_id: str, path: Path, reason: str, detail: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        moved: str | None = str(aside)
        try:
            os.replace(path, aside)
            _fsync_dir(path.parent)
        except OSError as exc:
            moved, detail = None, f"{detail}; could not move aside: {exc}"
        self.problems.append(
            StateProblem(
                kind=kind,
                record_id=record_id,
                path=str(path),
                moved_to=moved,
                reason=reason,
                detail=detail[:600],
                at=datetime.now(UTC).isoformat(timespec="seconds"),
            )
        )

    # -- async facade ---------------------------------------------------------------------------------------
    async def open(self) -> None:
        await anyio.to_thread.run_sync(self.open_sync)

    async def put(self, collection: Collection[R], record_id: str, record: R) -> None:
        await anyio.to_thread.run_sync(self.put_sync, collection, record_id, record)

    async def update(
        self, collection: Collection[R], record_id: str, change: Callable[[R | None], R | None]
    ) -> R | None:
        return await anyio.to_thread.run_sync(self.update_sync, collection, record_id, change)

    async def get(self, collection: Collection[R], record_id: str) -> R | None:
        return await anyio.to_thread.run_sync(self.get_sync, collection, record_id)

    async def delete(self, collection: Collection[R], record_id: str) -> bool:
        return await anyio.to_thread.run_sync(self.delete_sync, collection, record_id)

    async def load_all(self, collection: Collection[R]) -> dict[str, R]:
        return await anyio.to_thread.run_sync(self.load_all_sync, collection)

    def status(self) -> dict[str, Any]:
        """For ``gateway_health``: where the store is and what was moved aside."""
        return {"root": str(self.root), "problems": [p.model_dump(mode="json") for p in self.problems]}
