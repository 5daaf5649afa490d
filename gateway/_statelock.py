"""One owner per state directory: an OS lock (``flock``) on ``<dir>/gateway.lock``, held for life.

Two gateways on one state directory rewrite each other's keys, ``ssh_config``, token and audit chain; the
second one therefore refuses to start, naming the owner's PID and how to give it a directory of its own.
The kernel drops the lock when the owner exits however it exits, so a dead owner's file never blocks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import Self

from gateway._errors import StartupError

__all__ = ["LOCK_NAME", "DirectoryBusy", "DirectoryLock"]

LOCK_NAME = "gateway.lock"


class DirectoryBusy(StartupError):
    """Another live process holds the directory's lock."""

    def __init__(self, message: str, *, path: Path, owner_pid: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.owner_pid = owner_pid


class DirectoryLock:
    """``with DirectoryLock(dir, hint=...)``: the directory is this process's until it exits or leaves.

    ``hint`` is what the refusal tells the user to do (the option that gives a directory of its own);
    ``lock_file`` locks one file's use instead (an audit file outside the state directory).
    """

    def __init__(self, directory: Path, *, what: str, hint: str, lock_file: Path | None = None) -> None:
        self.directory = directory
        self.path = lock_file or directory / LOCK_NAME
        self._what = what
        self._hint = hint
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StartupError(f"cannot open the lock file {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_pid(fd)
            os.close(fd)
            by = f"another remoteops-gateway (pid {owner})" if owner else "another remoteops-gateway"
            raise DirectoryBusy(
                f"{self._what} {self.directory} is in use by {by}; {self._hint}",
                path=self.directory,
                owner_pid=owner,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None
