"""File primitives over a tree: LIST and FIND (one walk, filtered), GREP. The walk is iterative (a stack,
never recursion), pre-order, each directory's names in byte order; links are never followed."""

from __future__ import annotations

import errno
import os
from typing import Any

from .codec import wire_bytes, wire_text
from .files import _describe, _FileRefusal, _kind_of, _path

__all__ = ["_file_grep", "_file_list", "_walk"]


def _walk(root: bytes, depth: int, hidden: bool, errors: list[dict[str, Any]]) -> Any:
    """(relative path, lstat) of everything under ``root`` down to ``depth``: pre-order, each directory's
    names in byte order (the same order on every call); links are never followed. Unreadable directories
    are added to ``errors``."""
    if not 1 <= depth <= 64:
        raise _FileRefusal("bad_request", "depth must be in 1..64")
    if _kind_of(os.stat(root).st_mode) != "directory":
        raise _FileRefusal("os", "not a directory", errno="ENOTDIR", path=wire_text(root))
    # a stack of (relative directory, its remaining names, level): no recursion
    stack: list[tuple[bytes, list[bytes], int]] = []

    def push(rel: bytes, level: int) -> None:
        try:
            names = sorted(os.listdir(os.path.join(root, rel) if rel else root), reverse=True)
        except OSError as exc:
            errors.append({"path": wire_text(rel), "errno": errno.errorcode.get(exc.errno or 0, "EIO")})
            return
        stack.append((rel, [n for n in names if hidden or not n.startswith(b".")], level))

    push(b"", 1)
    while stack:
        rel, names, level = stack[-1]
        if not names:
            stack.pop()
            continue
        child = os.path.join(rel, names.pop()) if rel else names.pop()
        try:
            st = os.lstat(os.path.join(root, child))
        except OSError:
            continue  # vanished while walking
        yield child, st
        if _kind_of(st.st_mode) == "directory" and level < depth:
            push(child, level + 1)


def _file_list(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """Entries under a directory in :func:`_walk` order, at most ``limit`` (``truncated`` when more were
    there). FIND: only those matching name glob, type, size and mtime bounds (at most ``scan`` visited)."""
    root = _path(meta)
    depth, limit, hidden = int(meta.get("depth", 1)), int(meta.get("limit", 1000)), bool(meta.get("hidden"))
    if limit < 1:
        raise _FileRefusal("bad_request", "limit must be >= 1")
    name = wire_bytes(meta["name"]) if meta.get("name") else None
    kind = meta.get("type")
    low_size, high_size = meta.get("min_size"), meta.get("max_size")
    after, before = meta.get("mtime_min"), meta.get("mtime_max")
    scan = int(meta.get("scan", 1_000_000))
    entries: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    truncated = False
    visited = 0
    for child, st in _walk(root, depth, hidden, errors):
        visited += 1
        if visited > scan:
            truncated = True
            break
        if name is not None:
            import fnmatch

            if not fnmatch.fnmatchcase(os.path.basename(child), name):
                continue
        if kind is not None and _kind_of(st.st_mode) != kind:
            continue
        if (low_size is not None and st.st_size < low_size) or (
            high_size is not None and st.st_size > high_size
        ):
            continue
        if (after is not None and st.st_mtime < after) or (before is not None and st.st_mtime > before):
            continue
        if len(entries) >= limit:
            truncated = True
            break
        info = _describe(os.path.join(root, child), st)
        info["path"] = wire_text(child)
        entries.append(info)
    return {"entries": entries, "truncated": truncated, "errors": errors, "visited": visited}, b""


_BINARY_PROBE = 8192
_GREP_FILE_MAX = 32 * 1024 * 1024
_GREP_LINE_MAX = 1000


def _grep_file(path: bytes, rel: bytes, regex: Any, meta: dict[str, Any], out: dict[str, Any]) -> None:
    context = int(meta.get("context", 0))
    try:
        with open(path, "rb") as fh:
            content = fh.read(_GREP_FILE_MAX + 1)
    except OSError as exc:
        out["skipped"].append({"path": wire_text(rel), "reason": errno.errorcode.get(exc.errno or 0, "EIO")})
        return
    if len(content) > _GREP_FILE_MAX:
        out["skipped"].append({"path": wire_text(rel), "reason": "too_large"})
        return
    if b"\0" in content[:_BINARY_PROBE]:
        out["skipped"].append({"path": wire_text(rel), "reason": "binary"})
        return
    out["files_searched"] += 1
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()

    def shown(index: int) -> str:
        return wire_text(lines[index][:_GREP_LINE_MAX])

    for number, line in enumerate(lines):
        if not regex.search(line):
            continue
        if len(out["matches"]) >= out["max_matches"] or out["bytes"] >= out["max_bytes"]:
            out["truncated"] = True
            return
        match = {
            "path": wire_text(rel),
            "line": number + 1,
            "text": shown(number),
            "before": [shown(i) for i in range(max(0, number - context), number)],
            "after": [shown(i) for i in range(number + 1, min(len(lines), number + 1 + context))],
        }
        out["bytes"] += min(len(line), _GREP_LINE_MAX) + 64
        out["matches"].append(match)


def _file_grep(meta: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    """Lines matching a Python regular expression in the regular files under ``path`` (or in one file),
    in :func:`_walk` order; binary files (a NUL byte in the first 8 KiB) are skipped and reported."""
    import fnmatch
    import re

    root = _path(meta)
    try:
        regex = re.compile(wire_bytes(meta["pattern"]), re.IGNORECASE if meta.get("ignore_case") else 0)
    except re.error as exc:
        raise _FileRefusal("bad_request", "bad pattern: " + str(exc)) from None
    include = [wire_bytes(g) for g in meta.get("include", [])]
    exclude = [wire_bytes(g) for g in meta.get("exclude", [])]
    out: dict[str, Any] = {"matches": [], "skipped": [], "truncated": False, "files_searched": 0, "bytes": 0,
                           "max_matches": int(meta.get("max_matches", 200)),
                           "max_bytes": int(meta.get("max_bytes", 65536))}  # fmt: skip
    errors: list[dict[str, Any]] = []
    if _kind_of(os.stat(root).st_mode) == "file":
        _grep_file(root, os.path.basename(root), regex, meta, out)
    else:
        for child, st in _walk(root, int(meta.get("depth", 64)), bool(meta.get("hidden")), errors):
            if out["truncated"]:
                break
            base = os.path.basename(child)
            if _kind_of(st.st_mode) != "file":
                continue
            if include and not any(fnmatch.fnmatchcase(base, g) for g in include):
                continue
            if any(fnmatch.fnmatchcase(base, g) for g in exclude):
                continue
            _grep_file(os.path.join(root, child), child, regex, meta, out)
    for key in ("bytes", "max_matches", "max_bytes"):
        del out[key]
    out["errors"] = errors
    return out, b""
