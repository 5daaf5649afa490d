"""Audit shipping (``[audit.ship]``): each audit record also POSTed to a collector, in order, via a spool.

The audit writer hands each batch it wrote to the audit file to :meth:`AuditShipper.spool` in its worker
thread — the very lines of the file, already redacted — so shipping never blocks a tool call and never sees
anything the audit file does not hold. :class:`~gateway.audit.spool.Spool` keeps them on disk under
``<state_dir>/audit-spool`` (bounded; what a full spool gives up is counted) until the collector has them.

One task delivers them, one POST in flight at a time, oldest first::

    POST <url>
    Authorization: Bearer <token from bearer_token_file>
    Content-Type: application/x-ndjson
    Idempotency-Key: <stream>:<first-seq>-<last-seq>
    X-Remoteops-Audit-Stream: <stream>
    X-Remoteops-Audit-First-Seq: <first-seq>
    X-Remoteops-Audit-Count: <n>

    <n audit lines, exactly as in the audit file>

Record ``i`` of the body has sequence number ``first-seq + i``; ``(stream, seq)`` identifies a record for
good (numbers are consecutive per stream and survive restarts), so a collector that keeps the highest
sequence number it stored per stream (or a set of keys) stores each record **exactly once**: a POST whose
answer was lost (timeout, reset, gateway killed) is sent again — possibly cut differently — and the
collector drops what it already has. Any 2xx acknowledges the whole batch; nothing is dropped on the
gateway's side before that.

Answers: 2xx → delivered. 408, 425, 429, 5xx, connection errors and the per-POST ceiling ``timeout_s`` →
retried with capped exponential backoff (tenacity, ``backoff_initial_s`` … ``backoff_max_s``, jittered);
one outage is one tenacity run, ended by a delivery or by shutdown. 400, 413 and 422 → the batch is
halved until one record is left; a single record the collector still refuses is skipped and counted as
``rejected`` (so one bad record cannot stop the stream). 401, 403 and any other answer → retried (a token
or collector to fix; nothing is lost meanwhile). Each failing episode is logged once, and the counters,
``healthy`` and ``last_error`` are in ``gateway_health`` (``audit.ship``).

Lifecycle: ``async with`` (entered by the :class:`~gateway.audit.log.AuditLog`): recovers the spool, then
delivers until closed; closing gives pending records ``close_timeout_s`` (shielded) and leaves the rest in
the spool for the next start. httpx is imported only when shipping is configured.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

import anyio
import structlog
from anyio.abc import TaskGroup
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_never

from gateway._redact import Redactor
from gateway.audit.spool import Spool
from gateway.auth.proxy import read_secret_file
from gateway.config import AuditShipSettings, Settings
from upstream import Backoff

if TYPE_CHECKING:
    import httpx

__all__ = ["AuditShipper", "build_shipper"]

_log = structlog.get_logger("gateway.audit_ship")
_CLOSE_TIMEOUT_S = 5.0
_RETRY_STATUS = frozenset({408, 425, 429})
_SHRINK_STATUS = frozenset({400, 413, 422})


class _Retry(Exception):
    """The batch was not delivered; try again after a backoff."""


class _Shrink(Exception):
    """The collector refused the batch as such: send fewer records."""


class _Stale(Exception):
    """A full spool dropped records of the batch while it waited for a retry: read again from the head."""


class AuditShipper:
    def __init__(
        self,
        cfg: AuditShipSettings,
        spool_dir: Path,
        *,
        token: str | None,
        close_timeout_s: float = _CLOSE_TIMEOUT_S,
    ) -> None:
        self._cfg = cfg
        self._token = token
        self._close_timeout_s = close_timeout_s
        self.spool_store = Spool(spool_dir, max_bytes=cfg.spool_max_bytes, when_full=cfg.when_full)
        self._batch = cfg.batch_records
        self._wakeup: anyio.Event | None = None
        self._tg: TaskGroup | None = None
        self._http: httpx.AsyncClient | None = None
        self._progress: anyio.Event | None = None
        parts = urlsplit(cfg.url)
        self._shown_url = f"{parts.scheme}://{parts.netloc}{parts.path}"  # never a query string
        self.delivered = 0
        self.rejected = 0
        self.posts = 0
        self.post_failures = 0
        self.last_error: str | None = None
        self.last_delivered_at: str | None = None

    # ------------------------------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        import httpx  # only when shipping is configured (start-up cost of plain serving)

        await anyio.to_thread.run_sync(self.spool_store.open)
        self._http = httpx.AsyncClient(timeout=self._cfg.timeout_s, follow_redirects=False)
        self._wakeup = anyio.Event()
        self._wakeup.set()  # a spool left by the last run is delivered at once
        self._progress = anyio.Event()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(self._run)
        self._tg = tg
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tg, http, self._tg = self._tg, self._http, None
        if tg is None or http is None:
            return
        self.wake()
        # A last chance for what is pending, while the collector answers (bounded, shielded).
        with anyio.move_on_after(self._close_timeout_s, shield=True):
            while self.spool_store.pending() and self.last_error is None and self._progress is not None:
                await self._progress.wait()
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._close_timeout_s):
            await http.aclose()
        pending = self.spool_store.pending()
        if pending:
            _log.warning("audit_ship_pending_at_exit", pending=pending, spool=str(self.spool_store.directory))

    async def wait_delivered(self) -> None:
        """Until nothing is pending (delivered, rejected or dropped). Unbounded: callers bound it."""
        while self.spool_store.pending() and self._progress is not None:
            await self._progress.wait()

    # ------------------------------------------------------------------------------------------ intake

    def spool(self, lines: list[str]) -> None:
        """Called by the audit writer in its worker thread with the lines it wrote; never raises."""
        self.spool_store.append(lines)

    def wake(self) -> None:
        """Loop side, after a batch was spooled: the delivery task looks again."""
        if self._wakeup is not None:
            self._wakeup.set()

    # ------------------------------------------------------------------------------------------ delivery

    async def _run(self) -> None:
        while True:
            if self._wakeup is not None:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
            try:
                await self._deliver_pending()
            except Exception as exc:  # e.g. the spool's disk: shown in health, tried again after a pause
                self.last_error = f"{type(exc).__name__}: {exc}"
                _log.error("audit_ship_error", error=self.last_error)
                await anyio.sleep(self._cfg.backoff_max_s)
                self.wake()

    async def _deliver_pending(self) -> None:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_Retry),
            # The project's one backoff (capped exponential, jitter only shortens): as for upstreams.
            wait=Backoff(
                initial_s=self._cfg.backoff_initial_s,
                max_s=max(self._cfg.backoff_max_s, self._cfg.backoff_initial_s),
                multiplier=2.0,
                jitter=0.5,
            ),
            stop=stop_never,  # one outage, ended by a delivery or by shutdown (cancellation)
            sleep=anyio.sleep,
            before_sleep=self._failed_attempt,
            reraise=True,
        )
        while self.spool_store.pending():
            first, lines = await anyio.to_thread.run_sync(
                self.spool_store.read, self._batch, self._cfg.batch_max_bytes
            )
            if not lines:
                return
            try:
                async for attempt in retrying:
                    with attempt:
                        await self._post(first, lines)
            except _Stale:
                continue
            except _Shrink:
                if len(lines) > 1:
                    self._batch = max(1, len(lines) // 2)
                    continue
                self.rejected += 1
                _log.error("audit_ship_record_rejected", seq=first, stream=self.spool_store.stream)
            else:
                self.delivered += len(lines)
                self._batch = min(self._cfg.batch_records, self._batch * 2)  # back up after a shrink
                self.last_delivered_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self._recovered()
            await anyio.to_thread.run_sync(self.spool_store.ack, first + len(lines))
            if self._progress is not None:
                done, self._progress = self._progress, anyio.Event()
                done.set()

    async def _post(self, first: int, lines: list[bytes]) -> None:
        http = self._http
        if http is None:
            raise RuntimeError("AuditShipper is not entered")
        if self.spool_store.head != first:  # dropped meanwhile (drop_oldest): never send what was counted
            raise _Stale
        stream = self.spool_store.stream
        headers = {
            "Content-Type": "application/x-ndjson",
            "Idempotency-Key": f"{stream}:{first}-{first + len(lines) - 1}",
            "X-Remoteops-Audit-Stream": stream,
            "X-Remoteops-Audit-First-Seq": str(first),
            "X-Remoteops-Audit-Count": str(len(lines)),
        }
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        import httpx

        self.posts += 1
        try:
            with anyio.fail_after(self._cfg.timeout_s):  # the ceiling of the whole POST, at the boundary
                response = await http.post(self._cfg.url, content=b"".join(lines), headers=headers)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise _Retry(type(exc).__name__) from None
        if 200 <= response.status_code < 300:
            return
        if response.status_code in _SHRINK_STATUS:
            raise _Shrink(str(response.status_code))
        raise _Retry(f"HTTP {response.status_code}")

    def _failed_attempt(self, state: RetryCallState) -> None:
        self.post_failures += 1
        error = state.outcome.exception() if state.outcome is not None else None
        text = f"{error}" if error is not None else "unknown"
        if self.last_error is None:
            _log.error(
                "audit_ship_failing", url=self._shown_url, error=text, pending=self.spool_store.pending()
            )
        self.last_error = text

    def _recovered(self) -> None:
        if self.last_error is not None:
            _log.warning("audit_ship_recovered", url=self._shown_url, pending=self.spool_store.pending())
        self.last_error = None

    # ------------------------------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        spool = self.spool_store.status()
        return {
            "url": self._shown_url,
            "healthy": self.last_error is None and self.spool_store.last_error is None,
            "last_error": self.last_error or self.spool_store.last_error,
            "delivered": self.delivered,
            "rejected": self.rejected,
            "posts": self.posts,
            "post_failures": self.post_failures,
            "last_delivered_at": self.last_delivered_at,
            **spool,
        }


def build_shipper(settings: Settings, redactor: Redactor) -> AuditShipper | None:
    """The shipper ``[audit.ship]`` asks for, or None; its token is read here and given to the redactor."""
    cfg = settings.audit.ship
    if not cfg.url:
        return None
    token = None
    if cfg.bearer_token_file is not None:
        token = read_secret_file(cfg.bearer_token_file, "audit.ship.bearer_token_file")
        redactor.add_secret(token)
    return AuditShipper(cfg, settings.state_dir / "audit-spool", token=token)
