"""Persistent interactive sessions on a target's tmux: ensure by name, send text and keys, read with cursors,
wait for output on the target, close; adopted again after a gateway restart.

Built only on the public :meth:`RemoteOps.run` (every program travels on stdin, see
``remoteops.sessions.scripts``) and the :class:`StateStore` (``<state_dir>/sessions/<id>.json``)::

    async with RemoteSessions(ops, store, SessionSettings(), transport) as sessions:
        await sessions.ensure("web", "build")
        sent = await sessions.send("web", "build", "make -j8", enter=True)
        done = await sessions.wait_for("web", "build", r"\\$ $", since=sent.cursor_before)

* Sessions run on a gateway-owned tmux socket (``<remote_dir>/tmux.sock``, ``-f /dev/null``), fixed size,
  with a history limit; never on the user's own tmux server.
* ``ensure`` looks on the target for the live session of that name: the recorded identity (tmux session id
  and creation time) → ``reattached``; another live one → ``reattached`` and ``adopted``; a new session is
  created only once the target proved that none of that name exists. Nothing here kills a live session
  except ``close`` of the recorded identity.
* After a restart the records are loaded and each is checked (identity on the target): alive or exited.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from types import TracebackType
from typing import Self

import anyio
import anyio.abc
import structlog

from remoteops._errors import InvalidRequest
from remoteops._programs import base64_read_cap, recover
from remoteops._runner import Runner
from remoteops._settings import TransportSettings
from remoteops._state import Collection as StoreCollection
from remoteops._state import StateStore
from remoteops.requests import check_pattern_line, check_time_limit
from remoteops.sessions.errors import (
    SessionConflict,
    SessionExited,
    SessionNotFound,
)
from remoteops.sessions.models import (
    SESSION_NAME,
    SendMode,
    SessionCloseResult,
    SessionEnsureResult,
    SessionHealth,
    SessionInfo,
    SessionRead,
    SessionRecord,
    SessionSendResult,
    SessionSettings,
    SessionState,
    SessionView,
    SessionWaitResult,
)
from remoteops.sessions.read import pane_read, plan_send, stream_read
from remoteops.sessions.wire import HOLD_MAX, SessionWire, Waited, strip_ansi

__all__ = ["SESSIONS", "RemoteSessions", "session_key"]

SESSIONS: StoreCollection[SessionRecord] = StoreCollection("sessions", SessionRecord, version=1)
ProgressFn = Callable[[int], Awaitable[None]]
_log = structlog.get_logger("remoteops.sessions")


def session_key(target: str, name: str) -> str:
    """The state-store ID of a session: deterministic per (target, name), safe as a file name."""
    return "s-" + hashlib.sha256(f"{target}\0{name}".encode()).hexdigest()[:24]


def _identity(record: SessionRecord) -> tuple[str, str, str]:
    """tmux session id, its creation time and the incarnation's directory (named with a random token)."""
    return record.tmux_id, record.tmux_created, record.remote_dir


class RemoteSessions:
    """Sessions on the configured targets of ``ops``, recorded in ``store``. An async context manager."""

    def __init__(
        self,
        ops: Runner,
        store: StateStore,
        settings: SessionSettings,
        transport: TransportSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ops = ops
        self._store = store
        self._settings = settings
        self._clock = clock
        self._read_cap = base64_read_cap(transport.output_cap_bytes)
        self._ceiling_s = transport.exec_timeout_max_s
        self._wait_slots_n = max(1, transport.max_channels_per_target // 4)
        self._wire = SessionWire(ops, settings, ceiling_s=transport.exec_timeout_max_s)
        self._records: dict[str, SessionRecord] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._wait_slots: dict[str, anyio.Semaphore] = {}
        self._reconciling: set[str] = set()
        self._recovered = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        await self._store.open()
        self._records = await self._store.load_all(SESSIONS)
        self._reconciling.update(r.id for r in self._records.values() if r.state == "alive")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._recover)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(exc_type, exc, tb)
        return None

    # -- records -------------------------------------------------------------------------------------------
    @staticmethod
    def _check_name(name: str) -> None:
        if not SESSION_NAME.fullmatch(name):
            raise InvalidRequest(field="name", reason=f"must match {SESSION_NAME.pattern}")

    def _get(self, target: str, name: str) -> SessionRecord:
        self._check_name(name)
        record = self._records.get(session_key(target, name))
        if record is None or record.target != target:
            raise SessionNotFound(f"no session {name!r} on {target!r}", target=target, session=name)
        return record

    async def _save(self, record: SessionRecord) -> SessionRecord:
        with anyio.CancelScope(shield=True):  # a cancelled caller must not leave memory and disk apart
            await self._store.put(SESSIONS, record.id, record)
        self._records[record.id] = record
        return record

    async def _mark(self, record: SessionRecord, state: SessionState) -> SessionRecord:
        """Fold one look at the target into the record; ``exited`` is final for an identity."""
        current = self._records.get(record.id)
        if current is None or _identity(current) != _identity(record):
            return record  # closed or replaced meanwhile: nothing to fold in
        now = self._clock()
        if state == "exited" and current.state == "alive":
            return await self._save(current.model_copy(update={"state": "exited", "exited_at": now}))
        if state == "alive" and current.state == "alive":
            return await self._save(current.model_copy(update={"last_seen_at": now}))
        return current

    # -- ensure --------------------------------------------------------------------------------------------
    async def ensure(self, target: str, name: str, *, cwd: str | None = None) -> SessionEnsureResult:
        """The live session ``name`` on ``target``: reattached, or created once its absence is proven."""
        self._ops.target(target)  # PolicyDenied before anything runs
        self._check_name(name)
        if cwd is not None and (not cwd or "\0" in cwd or "\n" in cwd):
            raise InvalidRequest(field="cwd", reason="must be non-empty, without NUL or newline")
        key = session_key(target, name)
        async with self._locks.setdefault(key, anyio.Lock()):
            recorded = self._records.get(key)
            token = secrets.token_hex(6)
            found = await self._wire.ensure(target, name, token=token, cwd=cwd)
            if (
                not re.fullmatch(rf".+/{re.escape(name)}\.[0-9a-f]+", found.remote_dir)
                or "/../" in found.remote_dir
            ):
                raise SessionConflict(
                    f"a session named {name!r} on the gateway's tmux socket was not made by this gateway",
                    target=target,
                    session=name,
                    reason="foreign_session",
                )
            same = recorded is not None and _identity(recorded) == (
                found.tmux_id,
                found.tmux_created,
                found.remote_dir,
            )
            now = self._clock()
            if same and recorded is not None:
                record = recorded.model_copy(
                    update={"state": "alive", "last_seen_at": now, "exited_at": None}
                )
            else:
                record = SessionRecord(
                    id=key,
                    target=target,
                    name=name,
                    state="alive",
                    tmux_id=found.tmux_id,
                    tmux_created=found.tmux_created,
                    remote_dir=found.remote_dir,
                    cwd=cwd if found.new else None,
                    width=self._settings.width,
                    height=self._settings.height,
                    created_at=now,
                    last_seen_at=now,
                )
            await self._save(record)
        outcome = "created" if found.new else "reattached"
        _log.info(
            "session_ensured",
            target=target,
            session=name,
            outcome=outcome,
            adopted=not found.new and not same,
        )
        info = SessionInfo.of(record).model_dump()
        return SessionEnsureResult(
            **info, outcome=outcome, adopted=not found.new and not same, output_bytes=found.output_bytes
        )

    # -- send ----------------------------------------------------------------------------------------------
    async def send(
        self,
        target: str,
        name: str,
        text: str | None = None,
        *,
        keys: Sequence[str] = (),
        enter: bool = False,
        mode: SendMode = "auto",
    ) -> SessionSendResult:
        """Deliver ``text`` (literal bytes, or pasted through a tmux buffer when multi-line), then ``keys``
        (a closed list of names), then Enter when ``enter``."""
        self._ops.target(target)
        record = self._get(target, name)
        payload, used, pressed = plan_send(text, keys, enter, mode, max_bytes=self._settings.send_max_bytes)
        if record.state == "exited":
            raise SessionExited("the session has ended on the target", target=target, session=name)
        try:
            before = await self._wire.send(record, payload, used, pressed)
        except SessionExited:
            await self._mark(record, "exited")
            raise
        return SessionSendResult(
            target=target,
            name=name,
            sent_bytes=len(payload),
            mode=used,
            keys=pressed,
            cursor_before=before,
        )

    # -- read ----------------------------------------------------------------------------------------------
    async def read(
        self,
        target: str,
        name: str,
        *,
        view: SessionView = "stream",
        since: int | None = None,
        max_bytes: int | None = None,
        lines: int | None = None,
        ansi: bool = False,
    ) -> SessionRead:
        """``stream``: bytes of output from ``since`` (``next_offset`` continues exactly after them);
        ``screen``: the visible pane; ``scrollback``: the last ``lines`` lines of history and screen."""
        self._ops.target(target)
        record = self._get(target, name)
        room = self._read_cap - HOLD_MAX  # for the look-ahead that finishes an escape sequence
        limit = min(max_bytes or self._settings.read_max_bytes, self._settings.read_max_bytes, room)
        if limit < 4 or (since is not None and since < 0):
            raise InvalidRequest(field="max_bytes", reason="max_bytes must be >= 4 and since >= 0")
        if view == "stream":
            return await self._read_stream(record, since or 0, limit, ansi)
        if record.state == "exited":
            raise SessionExited("the session has ended on the target", target=target, session=name)
        back = min(lines or self._settings.height, self._settings.history_limit + self._settings.height)
        try:
            cap = await self._wire.capture(record, view=view, limit=limit, lines_back=back, keep_ansi=ansi)
        except SessionExited:
            await self._mark(record, "exited")
            raise
        await self._mark(record, "alive")
        return pane_read(record, cap, view=view, limit=limit, ansi=ansi)

    async def _read_stream(self, record: SessionRecord, since: int, limit: int, ansi: bool) -> SessionRead:
        look_ahead = 0 if ansi else HOLD_MAX  # to finish an escape sequence that the limit would cut
        chunk = await self._wire.read_stream(record, since=since, limit=limit + look_ahead)
        record = await self._mark(record, "alive" if chunk.alive else "exited")
        return stream_read(record, chunk, limit=limit, ansi=ansi)

    # -- wait ----------------------------------------------------------------------------------------------
    async def wait_for(
        self,
        target: str,
        name: str,
        pattern: str,
        *,
        since: int | None = None,
        timeout_s: float | None = None,
        progress: ProgressFn | None = None,
    ) -> SessionWaitResult:
        """Block on the target until ``pattern`` (POSIX ERE) matches a line of output after ``since``
        (default: output that appears after the call; the unfinished last line counts), the session ends,
        or ``timeout_s`` passes."""
        self._ops.target(target)
        record = self._get(target, name)
        s = self._settings
        wanted = s.wait_default_s if timeout_s is None else timeout_s
        bound = check_time_limit(wanted, s.wait_max_s, zero_ok=True)
        check_pattern_line(pattern)
        if since is not None and since < 0:
            raise InvalidRequest(field="since", reason="must be >= 0")
        started = time.monotonic()

        def result(w: Waited) -> SessionWaitResult:
            return SessionWaitResult(
                target=target,
                name=name,
                outcome=w.outcome,
                matched=w.matched,
                line=strip_ansi(w.line) if w.line is not None else None,
                cursor=w.cursor,
                output_bytes=w.size,
                waited_ms=round((time.monotonic() - started) * 1000, 3),
            )

        if record.state == "exited":
            look = await self._wire.look(record)
            return result(Waited("session_exited", cursor=since or look.output_bytes, size=look.output_bytes))
        slots = self._wait_slots.setdefault(target, anyio.Semaphore(self._wait_slots_n))
        segment_max = max(0.5, min(s.wait_segment_s, self._ceiling_s - 5))
        while True:
            segment = min(segment_max, max(0.0, bound - (time.monotonic() - started)))
            async with slots:
                waited = await self._wire.wait(record, bound_s=segment, since=since, pattern=pattern)
            if waited.outcome == "session_exited":
                await self._mark(record, "exited")
                return result(waited)
            await self._mark(record, "alive")
            if waited.outcome == "matched" or time.monotonic() - started >= bound:
                return result(waited)
            since = (
                waited.cursor
            )  # resume at the unfinished last line: nothing that can still match is skipped
            if progress is not None:
                await progress(waited.size)

    # -- list, close, health, recovery ---------------------------------------------------------------------
    def list_sessions(
        self,
        *,
        target: str | None = None,
        state: SessionState | None = None,
        limit: int | None = None,
        among: Collection[str] | None = None,
    ) -> tuple[list[SessionInfo], int]:
        """Newest first, at most ``limit`` (capped by ``list_max``); also the number that matched. ``among``:
        only sessions on these targets (a caller restricted to some targets); None = every target."""
        cap = min(limit or self._settings.list_max, self._settings.list_max)
        chosen = [
            r
            for r in self._records.values()
            if (target is None or r.target == target)
            and (state is None or r.state == state)
            and (among is None or r.target in among)
        ]
        chosen.sort(key=lambda r: r.created_at, reverse=True)
        return [SessionInfo.of(r) for r in chosen[:cap]], len(chosen)

    async def close(self, target: str, name: str) -> SessionCloseResult:
        """Kill the recorded session (its identity checked on the target) and drop its record."""
        self._ops.target(target)
        record = self._get(target, name)
        async with self._locks.setdefault(record.id, anyio.Lock()):
            record = self._get(target, name)
            outcome, removed = await self._wire.close(record)
            with anyio.CancelScope(shield=True):
                await self._store.delete(SESSIONS, record.id)
            self._records.pop(record.id, None)
        _log.info("session_closed", target=target, session=name, outcome=outcome)
        return SessionCloseResult(target=target, name=name, outcome=outcome, directory_removed=removed)

    def health(self) -> SessionHealth:
        counts: dict[str, int] = {}
        for record in self._records.values():
            counts[record.state] = counts.get(record.state, 0) + 1
        s = self._settings
        return SessionHealth(
            total=len(self._records),
            by_state=dict(sorted(counts.items())),
            remote_dir=s.remote_dir,
            width=s.width,
            height=s.height,
            history_limit=s.history_limit,
            reconciling=len(self._reconciling),
        )

    async def _check(self, record: SessionRecord) -> SessionRecord:
        look = await self._wire.look(record)
        return await self._mark(record, "alive" if look.alive else "exited")

    async def _recover(self) -> None:
        """After a restart: check each recorded live session's identity on its target; never create."""
        pending = [r for r in self._records.values() if r.state == "alive"]
        try:
            await recover(pending, self._check, self._reconciling, event="session_recover_failed")
        finally:
            self._recovered.set()

    async def recovered(self) -> None:
        """Return once the startup check of the recorded sessions is done (each looked at once)."""
        await self._recovered.wait()
