"""How ``remoteops.files.operations`` speaks to the agent: paths to and from the wire, answers to records, the
agent's refusals to the ``_files_errors`` tree."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from remoteops._errors import CommandTimeout, InvalidRequest, RemoteOpsError, TransportError
from remoteops.agent import program as proto
from remoteops.files.errors import (
    FileAccessDenied,
    FileConflict,
    FileNotFound,
    FileRequestInvalid,
    ProtectedPath,
    RemoteFileError,
)
from remoteops.files.models import FileInfo, shown_path

__all__ = ["PathArg", "failure", "info", "malformed", "shown", "wire"]

PathArg = str | bytes
_MAX_PATH = 4096
_INVALID_ERRNOS = {"EISDIR", "ENOTDIR", "EINVAL", "ENOTEMPTY", "ELOOP", "ENAMETOOLONG", "EXDEV", "EBUSY"}


def wire(path: PathArg, field: str = "path") -> str:
    raw = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
    if not raw:
        raise InvalidRequest(field=field, reason="empty")
    if b"\0" in raw:
        raise InvalidRequest(field=field, reason="NUL byte")
    if len(raw) > _MAX_PATH:
        raise InvalidRequest(field=field, reason=f"longer than {_MAX_PATH} bytes")
    return proto.wire_text(raw)


def shown(wire: object) -> str | None:
    return shown_path(proto.wire_bytes(wire))[0] if isinstance(wire, str) else None


def info(meta: dict[str, Any], path: str) -> FileInfo:
    text, b64 = shown_path(proto.wire_bytes(path))
    target = meta.get("symlink_target")
    return FileInfo(
        path=text,
        path_b64=b64,
        type=meta["type"],
        size=int(meta["size"]),
        mode=f"{int(meta['mode']):04o}",
        uid=int(meta["uid"]),
        gid=int(meta["gid"]),
        owner=meta.get("owner"),
        group=meta.get("group"),
        mtime=float(meta["mtime"]),
        symlink_target=shown(target),
        sha256=meta.get("sha256"),
        sha256_error=meta.get("sha256_error"),
    )


def failure(target: str, meta: dict[str, Any]) -> RemoteOpsError:
    code, message = meta.get("code"), str(meta.get("message", ""))[:500]
    path = shown(meta.get("path"))
    if code == "conflict":
        sha = meta.get("sha256")
        return FileConflict(
            message,
            target=target,
            path=path,
            reason=str(meta.get("reason", "conflict")),
            current_sha256=sha if isinstance(sha, str) else None,
        )
    if code == "protected":
        return ProtectedPath(message, target=target, path=path, reason=str(meta.get("reason", "protected")))
    if code == "bad_request":
        return FileRequestInvalid(message, target=target, path=path)
    if code == "timeout":  # the agent killed the request's worker at its bound: nothing of it runs on
        limit = meta.get("limit_s")
        limit_s = float(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) else 0.0
        return CommandTimeout(message, target=target, time_limit_s=limit_s, remote_killed=True)
    if code == "os":
        name = str(meta.get("errno", "EIO"))
        detail = f"{message}: {path}" if path else message
        if name == "ENOENT":
            return FileNotFound(detail, target=target, path=path, errno=name)
        if name in ("EACCES", "EPERM"):
            return FileAccessDenied(detail, target=target, path=path, errno=name)
        if name == "EEXIST":
            return FileConflict(detail, target=target, path=path, reason="exists")
        if name in _INVALID_ERRNOS:
            return FileRequestInvalid(detail, target=target, path=path, errno=name)
        return RemoteFileError(detail, target=target, path=path, errno=name)
    return TransportError(f"the agent refused the request: {code}: {message}", target=target, stage="agent")


@contextlib.contextmanager
def malformed(target: str) -> Iterator[None]:
    """An agent answer that does not have the expected shape is a TransportError, never a crash."""
    try:
        yield
    except (KeyError, TypeError, ValueError) as exc:
        raise TransportError(
            f"the agent's answer is malformed: {exc!r}"[:300], target=target, stage="agent"
        ) from None
