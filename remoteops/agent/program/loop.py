"""The agent's one loop: frames in and out, HELLO and PING, dispatch, signals, reaping, timers, and the
agent's end. Nothing blocking runs here: an EXEC's I/O is non-blocking pipes, file work runs in workers
(``workers``). A callback that fails is logged as one short line on stderr and never ends the loop."""

from __future__ import annotations

import contextlib
import heapq
import os
import selectors
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from .changes import _FILE_KINDS
from .codec import (
    CANCEL,
    CREDIT,
    DATA,
    ERROR,
    EXEC,
    F_END,
    HELLO,
    PING,
    PROTOCOL_MAX,
    PROTOCOL_MIN,
    RESULT,
    FrameReader,
    _short,
    encode,
)
from .exec import _CONFIRM_FOR_S, _Exec
from .procs import _PR_SET_CHILD_SUBREAPER, _prctl
from .supervise import _Spare
from .workers import _FILE_WORKERS, _FileWork

__all__ = ["_Agent", "main"]

_OUT_CHUNK = 256 * 1024
_SHUTDOWN_GRACE_S = 1.0
_BUILD = globals().get("__rog_build__")  # the SHA-256 the loader checked (None when imported as a module)


def _log(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, ("rog-agent: " + message + "\n").encode("utf-8", "replace"))


class _Agent:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.sel = selectors.DefaultSelector()
        self.reader = FrameReader()
        self.out = bytearray()
        self.execs: dict[int, _Exec] = {}
        self.by_pid: dict[int, Any] = {}  # our child pid -> its owner (``reaped(status)``)
        self.timers: list[list[Any]] = []  # heap of [deadline, seq, callback or None when cancelled]
        self.seq = 0
        self.version = 0
        self.closing = False
        self.exit_at = 0.0
        self.signals: set[int] = set()
        self.base_env = dict(os.environb)
        # orphans of finished calls and of dead supervisors are re-parented to us and reaped here
        self.subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self.files = _FileWork(self)
        self.spare: _Spare | None = None  # a supervisor forked ahead of the next EXEC (``supervise``)

    # -- plumbing ----------------------------------------------------------------------------------------
    def later(self, delay_s: float, callback: Callable[[], None]) -> list[Any]:
        self.seq += 1
        timer = [time.monotonic() + delay_s, self.seq, callback]
        heapq.heappush(self.timers, timer)
        return timer

    def take_spare(self) -> _Spare | None:
        spare, self.spare = self.spare, None
        return spare

    def refill(self) -> None:
        """Fork the spare supervisor, if there is none (called once an answer is out: off the call's path)."""
        if self.spare is None and not self.closing:
            self.spare = _Spare.fork(self)

    def send(self, frame: bytes) -> None:
        pending = bool(self.out)
        self.out += frame
        if not pending:
            self._flush(1, 0)

    def _flush(self, fd: int, mask: int) -> None:
        while self.out:
            try:
                written = os.write(1, self.out[:_OUT_CHUNK])
            except BlockingIOError:
                break
            except OSError:  # the gateway side is gone
                self.out = bytearray()
                self.shutdown()
                return
            del self.out[:written]
        registered = 1 in self.sel.get_map()
        if self.out and not registered:
            self.sel.register(1, selectors.EVENT_WRITE, self._flush)
        elif not self.out and registered:
            self.sel.unregister(1)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.add(signum)

    def _wakeup(self, fd: int, mask: int) -> None:
        with contextlib.suppress(OSError):
            os.read(fd, 4096)

    def _handle_signals(self) -> None:
        pending, self.signals = self.signals, set()
        if signal.SIGCHLD in pending:
            self._reap()
        if pending & {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}:
            self.shutdown()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            owner = self.by_pid.pop(pid, None)
            if owner is not None:
                self._guarded(owner.reaped, status)

    def _guarded(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception as exc:  # a defect must not end the channel: one short line, no traceback
            _log(_short(exc))

    # -- frames ------------------------------------------------------------------------------------------
    def _stdin(self, fd: int, mask: int) -> None:
        try:
            chunk = os.read(0, _OUT_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(0)
            self.shutdown()
            return
        try:
            frames = self.reader.feed(chunk)
        except ValueError as exc:
            self.send(encode(0, ERROR, {"code": "protocol", "message": str(exc)}))
            self.sel.unregister(0)
            self.shutdown()
            return
        for request_id, kind, flags, meta, data in frames:
            try:
                self._dispatch(request_id, kind, flags, meta or {}, data)
            except Exception as exc:
                _log(_short(exc))
                if request_id and request_id not in self.execs and request_id not in self.files.jobs:
                    self.send(encode(request_id, ERROR, {"code": "internal", "message": _short(exc)}))

    def _dispatch(self, request_id: int, kind: int, flags: int, meta: dict[str, Any], data: bytes) -> None:
        if self.closing:
            return
        if kind == PING:
            self.send(encode(request_id, RESULT, {}))
            return
        if kind == HELLO:
            self._hello(request_id, meta)
            return
        if not self.version:
            self.send(encode(request_id, ERROR, {"code": "hello_first", "message": "HELLO comes first"}))
            return
        if kind == DATA:
            child = self.execs.get(request_id)
            if child is not None:
                child.data(data, bool(flags & F_END))
            return
        if kind == CREDIT:
            return  # streaming is not built yet: nothing to pace (never an answer: it is not a request)
        if kind == CANCEL:
            self._cancel(request_id, meta)
            return
        if kind not in _FILE_KINDS and kind != EXEC:
            message = f"request kind 0x{kind:02x} is not supported by this agent"
            self.send(encode(request_id, ERROR, {"code": "unsupported", "message": message}))
            return
        if request_id in self.execs or request_id in self.files.jobs:
            self.send(encode(request_id, ERROR, {"code": "bad_request", "message": "request id in use"}))
            return
        if kind in _FILE_KINDS:
            self.files.submit(request_id, kind, meta, data)
            return
        try:
            child = _Exec(self, request_id, meta)
        except (KeyError, TypeError, ValueError) as exc:
            self.send(encode(request_id, ERROR, {"code": "bad_request", "message": _short(exc)}))
            return
        self.execs[request_id] = child
        child.start()

    def _cancel(self, request_id: int, meta: dict[str, Any]) -> None:
        child = self.execs.get(request_id)
        if child is not None and not child.finished:
            child.cancelled = True
            child.kill(float(meta.get("grace_s", 1.0)))
        job = self.files.jobs.get(request_id)
        if job is not None:
            self.files.stop(job, "cancelled")

    def _hello(self, request_id: int, meta: dict[str, Any]) -> None:
        low, high = int(meta.get("min", 0)), int(meta.get("max", 0))
        version = min(high, PROTOCOL_MAX)
        if version < max(low, PROTOCOL_MIN):
            message = f"the gateway speaks protocol {low}..{high}, this agent {PROTOCOL_MIN}..{PROTOCOL_MAX}"
            self.send(encode(request_id, ERROR, {"code": "version", "message": message}))
            self.shutdown()
            return
        self.version = version
        info = {
            "version": version,
            "pid": self.pid,
            "uid": os.geteuid(),
            "python": ".".join(str(part) for part in sys.version_info[:3]),
            "subreaper": self.subreaper,
            "build": _BUILD if isinstance(_BUILD, str) else None,
            "file_workers": _FILE_WORKERS,
            "kinds": [HELLO, EXEC, DATA, CANCEL, PING, *sorted(_FILE_KINDS)],
        }
        self.send(encode(request_id, HELLO, info))
        self.later(0, self.refill)

    # -- life --------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stdin closed, stdout broken or asked to stop: kill everything started (file workers at once,
        commands TERM then KILL), then exit (bounded)."""
        if self.closing:
            return
        self.closing = True
        self.exit_at = time.monotonic() + _SHUTDOWN_GRACE_S + _CONFIRM_FOR_S
        self.files.stop_all()
        spare = self.take_spare()
        if spare is not None:
            spare.retire()
        for child in list(self.execs.values()):
            child.cancelled = True
            child.kill(_SHUTDOWN_GRACE_S)

    def run(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        os.set_blocking(0, False)
        os.set_blocking(1, False)
        self.sel.register(wake_r, selectors.EVENT_READ, self._wakeup)
        self.sel.register(0, selectors.EVENT_READ, self._stdin)
        while True:
            if self.closing and (not self.execs or time.monotonic() >= self.exit_at):
                break
            timeout = None
            if self.timers:
                timeout = max(0.0, self.timers[0][0] - time.monotonic())
            if self.closing:
                timeout = min(
                    timeout if timeout is not None else 1.0, max(0.0, self.exit_at - time.monotonic())
                )
            for key, mask in self.sel.select(timeout):
                if self.sel.get_map().get(key.fd) is key:  # not closed by an earlier callback of this round
                    self._guarded(key.data, key.fd, mask)
            self._handle_signals()
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                callback = heapq.heappop(self.timers)[2]
                if callback is not None:
                    self._guarded(callback)
            self._handle_signals()
        if self.out:
            os.set_blocking(1, True)
            with contextlib.suppress(OSError):
                os.write(1, bytes(self.out))


def main() -> None:
    try:
        _Agent().run()
    except Exception as exc:
        _log(_short(exc))
    os._exit(0)


if __name__ == "__rog_agent__":
    main()
