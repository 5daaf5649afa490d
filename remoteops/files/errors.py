"""Failures of the structured file operations; part of the remoteops exception tree::

RemoteOpsError
└── RemoteFileError          path (display text), errno (``ENOSPC``, ...): the filesystem refused
    ├── FileNotFound         ENOENT (the path, or a directory on the way, does not exist)
    ├── FileAccessDenied     EACCES / EPERM for the target's login user
    ├── FileConflict         reason: "exists" | "sha256_mismatch"; current_sha256 (None: no file)
    ├── FileRequestInvalid   the request does not fit what is there (a directory where a file is
    │                        expected, not UTF-8 where text was asked, ...)
    └── ProtectedPath        reason: "root" | "home" | "protected": delete refused, nothing removed
"""

from __future__ import annotations

from remoteops._errors import RemoteOpsError

__all__ = [
    "FileAccessDenied",
    "FileConflict",
    "FileNotFound",
    "FileRequestInvalid",
    "ProtectedPath",
    "RemoteFileError",
]


class RemoteFileError(RemoteOpsError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        path: str | None = None,
        errno: str | None = None,
    ) -> None:
        super().__init__(detail, target=target)
        self.path = path
        self.errno = errno


class FileNotFound(RemoteFileError):
    pass


class FileAccessDenied(RemoteFileError):
    pass


class FileRequestInvalid(RemoteFileError):
    pass


class FileConflict(RemoteFileError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        path: str | None = None,
        reason: str,
        current_sha256: str | None = None,
        hunk: int | None = None,
        occurrences: int | None = None,
    ) -> None:
        super().__init__(detail, target=target, path=path)
        self.reason = reason
        self.current_sha256 = current_sha256
        self.hunk = hunk
        self.occurrences = occurrences


class ProtectedPath(RemoteFileError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, path: str | None = None, reason: str
    ) -> None:
        super().__init__(detail, target=target, path=path)
        self.reason = reason
