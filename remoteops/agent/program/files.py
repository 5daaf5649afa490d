"""File primitives that touch one path: STAT, HASH, READ (bytes or whole lines), WRITE (atomic replace).

Each runs in a file worker (``workers``), never on the agent's loop. Paths are ``wire_bytes`` of the meta
field: any bytes, never through a shell. A refusal is :class:`_FileRefusal` (its ``meta`` is the ERROR
answer); an ``OSError`` becomes ERROR {code: "os", errno: name, path} (``changes._file_answer``)."""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Any

from .codec import wire_bytes, wire_text

__all__ = ["_FileRefusal", "_LinePicker", "_describe", "_file_hash", "_file_read", "_file_stat",
           "_file_write", "_fsync_dir", "_kind_of", "_path", "_split"]  # fmt: skip

_TMP_TAG = b".rog-"
_TMP_END = b".tmp"
_HASH_CHUNK = 1024 * 1024
_TYPES = ((0o140000, "socket"), (0o120000, "symlink"), (0o100000, "file"), (0o060000, "block"),
          (0o040000, "directory"), (0o020000, "char"), (0o010000, "fifo"))  # fmt: skip


class _FileRefusal(Exception):
    def __init__(self, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.meta = {"code": code, "message": message, **fields}


def _path(meta: dict[str, Any], key: str = "path") -> bytes:
    value = meta.get(key)
    if not isinstance(value, str) or not value:
        raise _FileRefusal("bad_request", key + " must be a non-empty string")
    path = wire_bytes(value)
    if b"\0" in path:
        raise _FileRefusal("bad_request", key + " holds a NUL byte")
    return path


def _kind_of(mode: int) -> str:
    fmt = mode & 0o170000
    for bits, name in _TYPES:
        if fmt == bits:
            return name
    return "unknown"


def _names(uid: int, gid: int) -> tuple[str | None, str | None]:
    owner = group = None
    try:
        import pwd

        owner = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        pass
    try:
        import grp

        group = grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        pass
    return owner, group


def _describe(path: bytes, st: os.stat_result) -> dict[str, Any]:
    owner, group = _names(st.st_uid, st.st_gid)
    kind = _kind_of(st.st_mode)
    info: dict[str, Any] = {
        "type": kind,
        "size": st.st_size,
        "mode": st.st_mode & 0o7777,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "owner": owner,
        "group": group,
        "mtime": st.st_mtime,
        "symlink_target": None,
    }
    if kind == "symlink":
        with contextlib.suppress(OSError):
            info["symlink_target"] = wire_text(os.readlink(path))
    return info


def _sha256_fd(fd: int) -> tuple[str, int]:
    import hashlib

    digest = hashlib.sha256()
    size = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, _HASH_CHUNK)
        if not chunk:
            return digest.hexdigest(), size
        digest.update(chunk)
        size += len(chunk)


def _current_sha256(path: bytes) -> str | None:
    """The SHA-256 of the regular file at ``path`` (following links), None when nothing is there."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    try:
        _regular(path, os.fstat(fd))
        return _sha256_fd(fd)[0]
    finally:
        os.close(fd)


def _regular(path: bytes, st: os.stat_result) -> None:
    kind = _kind_of(st.st_mode)
    if kind != "file":
        raise _FileRefusal("os", "not a regular file: " + kind, errno="EISDIR" if kind == "directory"
                           else "EINVAL", path=wire_text(path))  # fmt: skip


def _file_stat(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    path = _path(meta)
    st = os.stat(path) if meta.get("follow") else os.lstat(path)
    info = _describe(path, st)
    info["sha256"] = None
    if meta.get("hash") and info["type"] not in ("file", "symlink"):
        info["sha256_error"] = "not_a_regular_file"
    elif meta.get("hash"):
        # the metadata is answered whatever stops the hash; sha256_error says what did
        try:
            info["sha256"] = _current_sha256(path)
            if info["sha256"] is None:
                info["sha256_error"] = "not_found"  # a dangling link
        except _FileRefusal:
            info["sha256_error"] = "not_a_regular_file"
        except PermissionError:
            info["sha256_error"] = "permission_denied"
        except OSError as exc:
            info["sha256_error"] = errno.errorcode.get(exc.errno or 0, "EIO")
    return info, b""


def _file_hash(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    path = _path(meta)
    digest = _current_sha256(path)
    if digest is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    return {"sha256": digest}, b""


def _file_read(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """Bytes [offset, offset + length) of a regular file, or (``start_line`` given) its whole lines from
    that 1-based line on, ``line_count`` of them or to the end, at most ``length`` bytes; with the whole
    file's size and SHA-256."""
    import hashlib

    path = _path(meta)
    lines = meta.get("start_line") is not None
    offset, length = int(meta.get("offset", 0)), int(meta["length"])
    if offset < 0 or length < 0 or (lines and offset):
        raise _FileRefusal("bad_request", "offset and length must be >= 0 (offset 0 with start_line)")
    picker = _LinePicker(int(meta["start_line"]), meta.get("line_count"), length) if lines else None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        _regular(path, os.fstat(fd))
        digest = hashlib.sha256()
        size = 0
        out = bytearray()
        while True:
            chunk = os.read(fd, _HASH_CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            if picker is not None:
                picker.feed(chunk)
            else:
                lo, hi = max(offset - size, 0), min(offset + length - size, len(chunk))
                if lo < hi:
                    out += chunk[lo:hi]
            size += len(chunk)
    finally:
        os.close(fd)
    answer = {"size": size, "sha256": digest.hexdigest(), "offset": offset}
    if picker is None:
        return answer, bytes(out)
    found, content = picker.result(size)
    answer.update(found)
    return answer, content


class _LinePicker:
    """Finds lines [first, first + count) of a stream fed in chunks, keeping at most ``cap`` + 1 bytes.

    A line ends after its newline (the last one may have none, at the end of the file). Only whole lines
    are returned; when the cap cuts the lines asked, as many as fit (``truncated``), and when not even the
    first fits, its first ``cap`` bytes (``lines`` 0)."""

    def __init__(self, first: int, count: Any, cap: int) -> None:
        if first < 1 or (count is not None and int(count) < 1):
            raise _FileRefusal("bad_request", "start_line and line_count must be >= 1")
        self.skip = first - 1  # newlines before the first wanted line
        self.count = None if count is None else int(count)
        self.cap = cap
        self.pos = 0  # bytes fed so far
        self.start = 0 if first == 1 else -1  # byte offset of the first wanted line, -1 until found
        self.kept = bytearray()  # bytes from start, at most cap + 1 of them
        self.newlines = 0  # newlines in kept
        self.full = False  # kept holds all the lines asked (or cap + 1 bytes)

    def feed(self, chunk: bytes) -> None:
        piece = chunk
        if self.start < 0:
            seen = chunk.count(b"\n")
            if seen < self.skip:
                self.skip -= seen
                self.pos += len(chunk)
                return
            at = -1
            for _ in range(self.skip):
                at = chunk.find(b"\n", at + 1)
            self.skip = 0
            self.start = self.pos + at + 1
            piece = chunk[at + 1 :]
        self.pos += len(chunk)
        if self.full or not piece:
            return
        room = self.cap + 1 - len(self.kept)
        if len(piece) >= room:
            piece, self.full = piece[:room], True
        if self.count is not None:
            need = self.count - self.newlines
            at = -1
            for _ in range(min(need, piece.count(b"\n"))):
                at = piece.find(b"\n", at + 1)
                need -= 1
            if need == 0:
                piece, self.full = piece[: at + 1], True
        self.kept += piece
        self.newlines += piece.count(b"\n")

    def result(self, size: int) -> tuple[dict[str, Any], bytes]:
        """(meta fields, content) once the whole file was fed."""
        first = self.start
        if first < 0 or first >= size:  # the file has fewer than start_line lines
            none = {"offset": size, "lines": 0, "more_lines": False, "past_end": True, "truncated": False}
            return none, b""
        content, truncated = bytes(self.kept), False
        if len(content) > self.cap:
            cut = content.rfind(b"\n", 0, self.cap)
            content, truncated = content[: cut + 1] if cut >= 0 else content[: self.cap], True
        end = first + len(content)
        lines = content.count(b"\n")
        if content and not content.endswith(b"\n") and end == size:
            lines += 1  # the last line, without a newline
        return {"offset": first, "lines": lines, "more_lines": end < size, "past_end": False,
                "truncated": truncated}, content  # fmt: skip


def _tmp_pid(name: bytes) -> int | None:
    """The agent pid in a temporary file name ``.<base>.rog-<pid>-<hex>.tmp``, else None."""
    if not (name.startswith(b".") and name.endswith(_TMP_END)) or _TMP_TAG not in name:
        return None
    tail = name[name.rfind(_TMP_TAG) + len(_TMP_TAG) : -len(_TMP_END)]
    pid, _, token = tail.partition(b"-")
    if not pid.isdigit() or len(token) != 16 or token.strip(b"0123456789abcdef"):
        return None
    return int(pid)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: not there, or a zombie (a file worker killed with its agent is
    re-parented to whatever reaps orphans here, maybe late or never)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's live process
    try:
        with open("/proc/" + str(pid) + "/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X")


def _sweep(directory: bytes) -> None:
    """Remove temporary files a killed writer (a file worker, its pid in the name) left in ``directory``."""
    me = os.getpid()
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            pid = _tmp_pid(entry.name)
            if pid is None or pid == me or not _gone(pid):
                continue  # that writer is alive (its write may be in progress)
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.geteuid():
                    os.unlink(entry.path)


def _fsync_dir(directory: bytes) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _split(path: bytes) -> tuple[bytes, bytes]:
    directory, base = os.path.split(path)
    if not base:
        raise _FileRefusal("bad_request", "the path names a directory, not a file")
    return directory or b".", base


def _replace_atomically(path: bytes, content: bytes, mode: int, owner: tuple[int, int] | None) -> None:
    """Write a temporary file next to ``path``, fsync it, rename it over ``path``, fsync the directory.
    Whatever happens, ``path`` holds either its old or its new content, never a mix."""
    import secrets

    directory, base = _split(path)
    _sweep(directory)
    tmp = os.path.join(directory, b"." + base[:160] + _TMP_TAG + str(os.getpid()).encode() + b"-"
                       + secrets.token_hex(8).encode() + _TMP_END)  # fmt: skip
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view[:_HASH_CHUNK]) :]
            if owner is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(fd, owner[0], owner[1])
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _file_write(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    import hashlib

    path = _path(meta)
    if_exists = meta.get("if_exists", "overwrite")
    expected = meta.get("expected_sha256")
    if if_exists not in ("overwrite", "fail"):
        raise _FileRefusal("bad_request", "if_exists must be overwrite or fail")
    with contextlib.suppress(OSError):
        if os.path.islink(path):
            path = os.path.realpath(path)  # write through a link: the link stays a link
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        _regular(path, st)
        if not os.access(path, os.W_OK):  # replacing it would bypass its permissions (and its owner)
            raise PermissionError(errno.EACCES, "Permission denied", path)
        if if_exists == "fail":
            raise _FileRefusal("conflict", "the file exists", reason="exists", path=wire_text(path))
    if expected is not None:
        current = _current_sha256(path) if st is not None else None
        if current != expected:
            raise _FileRefusal("conflict", "the file changed", reason="sha256_mismatch", sha256=current,
                               path=wire_text(path))  # fmt: skip
    if st is not None:
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
        if meta.get("mode") is not None:
            mode = int(meta["mode"]) & 0o7777
    elif meta.get("mode") is not None:
        mode, owner = int(meta["mode"]) & 0o7777, None
    else:
        umask = os.umask(0o022)
        os.umask(umask)
        mode, owner = 0o666 & ~umask, None
    _replace_atomically(path, data, mode, owner)
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "created": st is None}, b""
