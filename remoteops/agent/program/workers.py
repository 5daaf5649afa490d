"""File requests off the loop: each runs in its own forked worker process, so nothing it does (a regex
that backtracks for ever, a FIFO opened with no writer, a slow disk) can delay exec output, time limits,
reaping or PING, and every one of them can be stopped (SIGKILL). At most ``_FILE_WORKERS`` run at once,
the rest wait in arrival order. Each request has a time bound counted from its arrival (``limit_s`` in
its meta, else ``_FILE_LIMIT_S``): past it the worker is killed and the answer is ERROR {code:
"timeout"}. A worker's answer is the frame it wrote on its pipe, checked to be one whole final frame of
its request; a worker that died without one is ERROR {code: "internal"}. Workers die with the agent
(``PR_SET_PDEATHSIG``).

Once the agent has done file work it keeps one worker forked ahead (``_SpareWorker``, forked after each
answer is out, as the spare supervisor is): the next request is handed to it on a pipe (marshal, then end
of file) instead of waiting for a fork of the agent, which with its copy-on-write faults was most of a
small request's time on the target. A request too big for the pipe (a large WRITE) retires the spare
unused and forks a worker as before; a spare that reads an end of file with nothing before it (retired,
or the agent gone) exits. In every other respect the spare is the same worker."""

from __future__ import annotations

import collections
import contextlib
import marshal
import os
import selectors
import signal
from typing import Any

from .changes import _file_answer
from .codec import ERROR, _final_frame, encode
from .procs import _PR_SET_PDEATHSIG, _close_all, _fork_with_pipes, _forked_child, _hand_over, _prctl

__all__ = ["_FILE_LIMIT_S", "_FILE_WORKERS", "_FileWork"]

_FILE_WORKERS = 8
_FILE_LIMIT_S = 45.0  # under the gateway's default ceiling (60 s): the agent's "timeout" answer comes first
_FILE_LIMIT_MAX_S = 24 * 3600.0
_WORKER_READ = 256 * 1024


def _answer_on(fd: int, request_id: int, kind: int, meta: dict[str, Any], data: bytes) -> None:
    view = memoryview(_file_answer(request_id, kind, meta, data))
    while view:
        view = view[os.write(fd, view) :]


def _file_worker(fd: int, parent: int, request_id: int, kind: int, meta: dict[str, Any], data: bytes) -> None:
    """The worker's life, in the forked child: answer one request on ``fd``; never returns."""
    try:
        _forked_child((fd,))
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == parent:  # else the agent died before the line above
            _answer_on(fd, request_id, kind, meta, data)
    except BaseException:  # noqa: S110 - the agent answers for a worker that wrote nothing
        pass
    finally:
        os._exit(0)


def _spare_worker(request: int, fd: int, parent: int) -> None:
    """A worker forked before its request: reads it on ``request``, then answers it on ``fd``; never
    returns."""
    try:
        _forked_child((request, fd))
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        blob = b""
        if os.getppid() == parent:  # else the agent died before the line above
            while chunk := os.read(request, 65536):
                blob += chunk
        os.close(request)
        if blob:
            request_id, kind, meta, data = marshal.loads(blob)  # noqa: S302 - written by our parent, the agent
            _answer_on(fd, request_id, kind, meta, data)
    except BaseException:  # noqa: S110 - the agent answers for a worker that wrote nothing
        pass
    finally:
        os._exit(0)


class _SpareWorker:
    """The agent's side of a spare worker: ``fork`` makes one; ``hand`` gives it a request and returns the
    answer pipe (None: it could not take it — the caller forks a worker as before)."""

    def __init__(self, work: _FileWork, pid: int, request_w: int, answer_r: int) -> None:
        self.work = work
        self.pid = pid
        self.fds: tuple[int, ...] = (request_w, answer_r)

    @staticmethod
    def fork(work: _FileWork) -> _SpareWorker | None:
        forked = _fork_with_pipes(2)
        if forked is None:
            return None
        pid, ends = forked
        request_r, request_w, answer_r, answer_w = ends
        if pid == 0:
            _spare_worker(request_r, answer_w, work.agent.pid)
        os.close(request_r)
        os.close(answer_w)
        os.set_blocking(request_w, False)
        spare = _SpareWorker(work, pid, request_w, answer_r)
        work.agent.by_pid[pid] = spare
        return spare

    def hand(self, job: _FileJob) -> int | None:
        request_w, answer_r = self.fds
        if not _hand_over(request_w, marshal.dumps((job.id, job.kind, job.meta, job.data))):
            self.retire()  # what it read is no request: it ends without doing anything
            return None
        self.fds = ()
        return answer_r

    def retire(self) -> None:
        """Close its pipes: an unused spare reads the end of its request and exits (the agent reaps it)."""
        fds, self.fds = self.fds, ()
        _close_all(fds)

    def reaped(self, status: int) -> None:
        """It died before it had a request."""
        self.retire()
        if self.work.spare is self:
            self.work.spare = None


class _FileJob:
    def __init__(
        self, work: _FileWork, request_id: int, kind: int, meta: dict[str, Any], data: bytes
    ) -> None:
        self.work = work
        self.id = request_id
        self.kind = kind
        self.meta = meta
        self.data = data
        self.limit_s = 0.0
        self.timer: list[Any] | None = None
        self.pid = 0
        self.fd = -1
        self.buf = bytearray()
        self.answered = False

    def readable(self, fd: int, mask: int) -> None:
        self.work.readable(self)

    def reaped(self, status: int) -> None:
        """The agent reaped the worker (its answer, if any, is read when its pipe ends)."""


class _FileWork:
    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.jobs: dict[int, _FileJob] = {}
        self.queue: collections.deque[_FileJob] = collections.deque()
        self.running: dict[int, _FileJob] = {}  # pid -> job whose worker's pipe is open
        self.spare: _SpareWorker | None = None  # a worker forked ahead of the next request

    def refill(self) -> None:
        """Fork the spare worker, if there is none (called once an answer is out: off the request's path)."""
        if self.spare is None and not self.agent.closing:
            self.spare = _SpareWorker.fork(self)

    def retire_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            spare.retire()

    def submit(self, request_id: int, kind: int, meta: dict[str, Any], data: bytes) -> None:
        job = _FileJob(self, request_id, kind, meta, data)
        limit = meta.get("limit_s", _FILE_LIMIT_S)
        if (
            isinstance(limit, bool)
            or not isinstance(limit, (int, float))
            or not 0 < limit <= _FILE_LIMIT_MAX_S
        ):
            self.agent.send(encode(request_id, ERROR, {"code": "bad_request", "message": "limit_s must be a "
                                                       "number of seconds > 0"}))  # fmt: skip
            return
        job.limit_s = float(limit)
        self.jobs[request_id] = job
        job.timer = self.agent.later(job.limit_s, lambda: self.stop(job, "timeout"))
        self.queue.append(job)
        self.pump()

    def pump(self) -> None:
        while self.queue and len(self.running) < _FILE_WORKERS and not self.agent.closing:
            self._start(self.queue.popleft())

    def _start(self, job: _FileJob) -> None:
        spare, self.spare = self.spare, None
        handed = spare.hand(job) if spare is not None else None
        if spare is not None and handed is not None:
            self._running(job, spare.pid, handed)
            return
        try:
            fd, w = os.pipe()
        except OSError as exc:
            self._answer(job, encode(job.id, ERROR, {"code": "internal", "message": "no pipe: " + str(exc)}))
            return
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(fd)
            os.close(w)
            self._answer(
                job, encode(job.id, ERROR, {"code": "internal", "message": "no worker: " + str(exc)})
            )
            return
        if pid == 0:
            _file_worker(w, self.agent.pid, job.id, job.kind, job.meta, job.data)
        os.close(w)
        self._running(job, pid, fd)

    def _running(self, job: _FileJob, pid: int, fd: int) -> None:
        os.set_blocking(fd, False)
        job.pid, job.fd = pid, fd
        self.running[pid] = job
        self.agent.by_pid[pid] = job
        self.agent.sel.register(fd, selectors.EVENT_READ, job.readable)

    def readable(self, job: _FileJob) -> None:
        try:
            chunk = os.read(job.fd, _WORKER_READ)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            job.buf += chunk
            return
        blob = bytes(job.buf)
        self._close(job)
        if _final_frame(blob, job.id):
            self._answer(job, blob)
        else:
            message = "the file worker ended without an answer"
            self._answer(job, encode(job.id, ERROR, {"code": "internal", "message": message}))
        self.pump()

    def _close(self, job: _FileJob) -> None:
        if job.fd >= 0:
            self.agent.sel.unregister(job.fd)
            os.close(job.fd)
            job.fd = -1
        self.running.pop(job.pid, None)
        job.buf = bytearray()

    def _answer(self, job: _FileJob, frame: bytes) -> None:
        if job.answered:
            return
        job.answered = True
        if job.timer is not None:
            job.timer[2] = None
        self.jobs.pop(job.id, None)
        job.data = b""
        self.agent.send(frame)
        self.agent.later(0, self.refill)  # the next request's worker, forked after this answer

    def stop(self, job: _FileJob, code: str) -> None:
        """End a request now (its bound passed, it was cancelled, the agent stops): kill its worker."""
        if job.answered:
            return
        if job.pid and job.fd >= 0:
            with contextlib.suppress(OSError):
                os.kill(job.pid, signal.SIGKILL)  # reaped by the agent when it has gone
            self._close(job)
        with contextlib.suppress(ValueError):
            self.queue.remove(job)
        if code == "timeout":
            message = "the file request did not finish within " + str(job.limit_s) + " s"
            meta: dict[str, Any] = {"code": code, "message": message, "limit_s": job.limit_s}
        else:
            meta = {"code": code, "message": "the file request was stopped"}
        self._answer(job, encode(job.id, ERROR, meta))
        self.pump()

    def stop_all(self) -> None:
        self.retire_spare()
        for job in list(self.jobs.values()):
            self.stop(job, "cancelled")
