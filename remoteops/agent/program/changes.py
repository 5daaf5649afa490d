"""File primitives that change the tree: MKDIR, MOVE (a copy across file systems), DELETE; the table of
file kinds and the one function that turns a request into its answer frame.

Nothing here recurses: ``mkdir -p``, the recursive delete and the tree copy are loops over directory
descriptors (``dir_fd``), so neither Python's recursion limit nor ``PATH_MAX`` bounds a tree's depth; at
most two descriptors per tree are open at a time, and climbing back up (``..``) is checked against the
directory we came from (device and inode), so a tree moved meanwhile is an error, never a walk elsewhere."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from typing import Any

from .codec import (
    DELETE,
    ERROR,
    FIND,
    GREP,
    HASH,
    LIST,
    MKDIR,
    MOVE,
    READ,
    RESULT,
    STAT,
    WRITE,
    _short,
    encode,
    wire_bytes,
    wire_text,
)
from .files import (
    _HASH_CHUNK,
    _TMP_END,
    _TMP_TAG,
    _file_hash,
    _file_read,
    _file_stat,
    _file_write,
    _FileRefusal,
    _fsync_dir,
    _kind_of,
    _path,
    _split,
)
from .tree import _file_grep, _file_list

__all__ = ["_FILE_KINDS", "_file_answer", "_rmtree"]

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def _make_parents(head: bytes) -> None:
    """``mkdir -p head`` with the default mode, in a loop (``os.makedirs`` recurses once per component)."""
    missing = []
    path = head
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path.rstrip(b"/"))
        if parent == path:
            break
        path = parent
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise


def _set_new_dir_mode(path: bytes, mode: int) -> None:
    """``mode`` exactly on a directory this request just made, through a descriptor of that directory
    (never following a link put in its place)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:  # the mode gives even the owner no read permission: by name, then
        os.chmod(path, mode)
        return
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _file_mkdir(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """A directory. With ``mode`` it gets exactly that mode, like ``mkdir -m``: made with it under a zero
    umask, then, where mkdir(2) could not give it (Linux ignores setgid in its mode and a setgid parent
    passes its setgid bit on; setuid), set with fchmod. Without ``mode``: the kernel's default (0777 less
    the umask, setgid inherited from a setgid parent). Missing parents (``parents``) get the default, as
    with ``mkdir -p -m``; a directory already there is left as it is. Answers whether this request made
    the directory and the mode it has now."""
    path = _path(meta)
    mode = meta.get("mode")
    if mode is not None and (not isinstance(mode, int) or not 0 <= mode <= 0o7777):
        raise _FileRefusal("bad_request", "mode must be a number in 0..0o7777")
    parents = bool(meta.get("parents"))
    if os.path.lexists(path):
        if parents and os.path.isdir(path):
            return {"created": False, "mode": os.stat(path).st_mode & 0o7777}, b""
        raise _FileRefusal("conflict", "the path exists", reason="exists", path=wire_text(path))
    head, tail = os.path.split(path)
    if not tail:  # "a/b/"
        head = os.path.split(head)[0]
    if parents and head and not os.path.isdir(head):
        _make_parents(head)  # the default mode, the umask applied
    try:
        if mode is None:
            os.mkdir(path)
        else:
            umask = os.umask(0)
            try:
                os.mkdir(path, mode & 0o1777)  # the permission bits and sticky; setgid is ignored
            finally:
                os.umask(umask)
            if os.lstat(path).st_mode & 0o7777 != mode:
                _set_new_dir_mode(path, mode)
    except FileExistsError:
        if parents and os.path.isdir(path):  # made by someone else since the check: mkdir -p is content
            return {"created": False, "mode": os.stat(path).st_mode & 0o7777}, b""
        raise
    _fsync_dir(os.path.dirname(os.path.abspath(path)))
    return {"created": True, "mode": os.lstat(path).st_mode & 0o7777}, b""


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_dir(name: Any, dir_fd: int, expect: tuple[int, int] | None = None) -> int:
    """A directory entry opened as a directory (never through a link), checked to be ``expect``."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    if expect is not None and _ident(os.fstat(fd)) != expect:
        os.close(fd)
        raise OSError(errno.ESTALE, "the tree changed while it was being worked on", name)
    return fd


def _up(fd: int, expect: tuple[int, int]) -> int:
    """The parent of directory ``fd`` (which is closed), checked to be the directory we came down from."""
    try:
        return _open_dir("..", fd, expect)
    finally:
        os.close(fd)


def _rmtree(path: bytes) -> None:
    """Remove directory ``path`` and everything under it, links never followed, at any depth: a loop
    that empties the current directory of non-directories, goes down into the first subdirectory, and
    when a directory is empty goes up and removes it."""
    parent, base = os.path.split(path.rstrip(b"/") or path)
    if base in (b"", b".", b".."):
        raise _FileRefusal("bad_request", "the path must name a directory entry, not . or ..")
    top = os.open(parent or b".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    cur = -1
    chain: list[Any] = []  # (dev, ino, name) from base down to the current directory
    try:
        st = os.stat(base, dir_fd=top, follow_symlinks=False)
        cur = _open_dir(base, top, _ident(st))
        chain.append((st.st_dev, st.st_ino, base))
        while True:
            sub = None
            with os.scandir(cur) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    os.unlink(entry.name, dir_fd=cur)
            if sub is not None:
                st = os.stat(sub, dir_fd=cur, follow_symlinks=False)
                down = _open_dir(sub, cur, _ident(st))
                os.close(cur)
                cur = down
                chain.append((st.st_dev, st.st_ino, sub))
                continue
            name = chain.pop()[2]
            if not chain:
                os.close(cur)
                cur = -1
                os.rmdir(base, dir_fd=top)
                return
            old, cur = cur, -1
            cur = _up(old, chain[-1][:2])
            os.rmdir(name, dir_fd=cur)
    except OSError as exc:
        _name_in_tree(exc, path, chain)
        raise
    finally:
        if cur >= 0:
            os.close(cur)
        os.close(top)


def _name_in_tree(exc: OSError, root: bytes, chain: list[Any]) -> None:
    """An error on an entry met deep in a tree names it from the tree's root (for the answer)."""
    if exc.filename is None or chain == [] or os.fsencode(exc.filename) == root:
        return
    parts = [os.fsencode(link[2]) for link in chain[1:]]
    exc.filename = os.path.join(root, *parts, os.fsencode(exc.filename))


def _copy_entry(name: str, kind: str, st: os.stat_result, src: int, dst: int) -> None:
    times = (st.st_atime_ns, st.st_mtime_ns)
    if kind == "symlink":
        os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
        with contextlib.suppress(NotImplementedError, OSError):
            os.utime(name, ns=times, dir_fd=dst, follow_symlinks=False)
    elif kind == "file":
        nofollow = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
        fin = os.open(name, os.O_RDONLY | nofollow, dir_fd=src)
        try:
            fout = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, 0o600, dir_fd=dst)
            try:
                while True:
                    view = memoryview(os.read(fin, _HASH_CHUNK))
                    if not view:
                        break
                    while view:
                        view = view[os.write(fout, view) :]
                os.fchmod(fout, stat.S_IMODE(st.st_mode))
                os.utime(fout, ns=times)
            finally:
                os.close(fout)
        finally:
            os.close(fin)
    elif kind == "fifo":
        os.mkfifo(name, 0o600, dir_fd=dst)
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dst, follow_symlinks=False)  # the umask left out
        os.utime(name, ns=times, dir_fd=dst, follow_symlinks=False)
    else:
        raise OSError(errno.EINVAL, "cannot copy a " + kind, name)


def _copytree(source: bytes, destination: bytes) -> None:
    """Copy directory ``source`` to the new ``destination`` like ``shutil.copytree(symlinks=True)``
    (contents, links as links, modes and times), at any depth: both trees are walked in step, one
    directory descriptor each, with the names still to copy of every level on a stack."""
    src_parent, src_base = os.path.split(source.rstrip(b"/") or source)
    dst_parent, dst_base = _split(destination)
    sp = os.open(src_parent or b".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    dp = src = dst = -1
    try:
        dp = os.open(dst_parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        st = os.stat(src_base, dir_fd=sp, follow_symlinks=False)
        src = _open_dir(src_base, sp, _ident(st))
        os.mkdir(dst_base, 0o700, dir_fd=dp)
        dst = _open_dir(dst_base, dp)
        # each level: [names left to copy, the source directory's stat, the copy's identity]
        levels: list[list[Any]] = [[sorted(os.listdir(src), reverse=True), st, _ident(os.fstat(dst))]]
        while True:
            names, here, _ = levels[-1]
            if names:
                name = names.pop()
                est = os.stat(name, dir_fd=src, follow_symlinks=False)
                kind = _kind_of(est.st_mode)
                if kind != "directory":
                    _copy_entry(name, kind, est, src, dst)
                    continue
                os.mkdir(name, 0o700, dir_fd=dst)
                down_src = _open_dir(name, src, _ident(est))
                old, src = src, down_src
                os.close(old)
                old, dst = dst, _open_dir(name, dst)
                os.close(old)
                levels.append([sorted(os.listdir(src), reverse=True), est, _ident(os.fstat(dst))])
                continue
            os.fchmod(dst, stat.S_IMODE(here.st_mode))
            os.utime(dst, ns=(here.st_atime_ns, here.st_mtime_ns))
            levels.pop()
            if not levels:
                return
            old, src = src, -1
            src = _up(old, _ident(levels[-1][1]))
            old, dst = dst, -1
            dst = _up(old, levels[-1][2])
    finally:
        for fd in (src, dst, sp, dp):
            if fd >= 0:
                os.close(fd)


def _copy_tree(source: bytes, destination: bytes) -> None:
    """Across filesystems: a copy next to the destination, renamed into place, then the source removed."""
    import secrets
    import shutil

    directory, base = _split(destination)
    tmp = os.path.join(directory, b"." + base[:160] + _TMP_TAG + str(os.getpid()).encode() + b"-"
                       + secrets.token_hex(8).encode() + _TMP_END)  # fmt: skip
    tree = os.path.isdir(source) and not os.path.islink(source)
    try:
        if tree:
            _copytree(source, tmp)
        else:
            shutil.copy2(source, tmp, follow_symlinks=False)
            if not os.path.islink(tmp):
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        os.rename(tmp, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            if os.path.isdir(tmp) and not os.path.islink(tmp):
                _rmtree(tmp)
            else:
                os.unlink(tmp)
        raise
    _fsync_dir(directory)
    if tree:
        _rmtree(source)
    else:
        os.unlink(source)


def _file_move(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    source, destination = _path(meta, "source"), _path(meta, "destination")
    os.lstat(source)  # not_found names the source
    if not meta.get("overwrite") and os.path.lexists(destination):
        raise _FileRefusal("conflict", "the destination exists", reason="exists",
                           path=wire_text(destination))  # fmt: skip
    try:
        os.rename(source, destination)
        cross = False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        _copy_tree(source, destination)
        cross = True
    _fsync_dir(os.path.dirname(os.path.abspath(destination)))
    return {"cross_filesystem": cross}, b""


def _home() -> bytes:
    try:
        import pwd

        return os.fsencode(pwd.getpwuid(os.geteuid()).pw_dir)
    except (ImportError, KeyError):
        return os.path.expanduser(b"~")


def _file_delete(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    path = _path(meta)
    directory, base = os.path.split(os.path.abspath(path))
    # the entry itself (a link is removed, never followed), in its real directory
    real = os.path.join(os.path.realpath(directory), base) if base else os.path.realpath(path)
    homes = [(os.path.realpath(_home()), "home")]
    if os.environb.get(b"HOME"):
        homes.append((os.path.realpath(os.environb[b"HOME"]), "home"))
    listed = [os.path.realpath(wire_bytes(p)) for p in meta.get("protected", []) if isinstance(p, str)]
    # "/" and the home (the account's and $HOME) themselves; an operator-listed path and everything under it;
    # for a recursive delete also any directory holding one of them
    for guard, reason in [(b"/", "root")] + homes + [(p, "protected") for p in listed]:
        inside = reason == "protected" and real.startswith(guard.rstrip(b"/") + b"/")
        holds = bool(meta.get("recursive")) and guard.startswith(real.rstrip(b"/") + b"/")
        if real == guard or inside or holds:
            raise _FileRefusal("protected", "refusing to delete " + wire_text(real) + " (" + reason + ")",
                               reason=reason, path=wire_text(guard))  # fmt: skip
    st = os.lstat(path)
    kind = _kind_of(st.st_mode)
    if kind == "directory":
        if not meta.get("recursive"):
            raise _FileRefusal("os", "a directory (recursive: true deletes it)", errno="EISDIR",
                               path=wire_text(path))  # fmt: skip
        _rmtree(path)
    else:
        os.unlink(path)
    _fsync_dir(directory or b".")
    return {"type": kind}, b""


_FILE_KINDS: dict[int, Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]] = {
    STAT: _file_stat,
    READ: _file_read,
    WRITE: _file_write,
    HASH: _file_hash,
    LIST: _file_list,
    FIND: _file_list,
    GREP: _file_grep,
    MKDIR: _file_mkdir,
    MOVE: _file_move,
    DELETE: _file_delete,
}


def _file_answer(request_id: int, kind: int, meta: dict[str, Any], data: bytes) -> bytes:
    """The one frame answering a file request."""
    try:
        result, payload = _FILE_KINDS[kind](meta, data)
        return encode(request_id, RESULT, result, payload)
    except _FileRefusal as exc:
        return encode(request_id, ERROR, exc.meta)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "EIO")
        where = exc.filename if isinstance(exc.filename, (bytes, str)) else None
        path = wire_text(os.fsencode(where)) if where is not None else None
        return encode(request_id, ERROR, {"code": "os", "errno": name, "message": exc.strerror or name,
                                          "path": path})  # fmt: skip
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        return encode(request_id, ERROR, {"code": "bad_request", "message": _short(exc)})
    except Exception as exc:  # a defect, never a crash: a short "type: message", no traceback
        return encode(request_id, ERROR, {"code": "internal", "message": _short(exc)})
