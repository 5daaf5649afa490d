"""Structured file operations on a target, carried as requests of its agent (``_agent_program``).

``ops.files.read("web", "/etc/nginx/nginx.conf")``: paths are data (``str`` or the exact ``bytes``), never
a shell word; contents travel as raw bytes in the agent's frames. Every operation needs the agent: a
target whose carrier is ssh or that has no usable python3 is ``MissingCapability``. Writes are atomic on
the target (temporary file in the same directory, fsync, rename, directory fsync). A request whose answer
never came after it was sent is ``TransportLost`` (it may have been carried out; ``stat`` with
``sha256=True`` tells which content is there). Failures are the :mod:`remoteops.files.errors` tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio

from remoteops._errors import CommandTimeout, InvalidRequest
from remoteops._runner import AgentRequests
from remoteops.agent import program as proto
from remoteops.files import wire as w
from remoteops.files.errors import FileConflict, FileRequestInvalid
from remoteops.files.models import (
    DeleteResult,
    FileContent,
    FileInfo,
    FileKind,
    GrepMatch,
    GrepResult,
    GrepSkipped,
    ListError,
    ListResult,
    MkdirResult,
    MoveResult,
    WriteResult,
    shown_path,
)
from remoteops.files.patch import MAX_PATCH_BYTES, Hunk, PatchResult, apply_hunks
from remoteops.files.requests import (
    FileMode,
    GrepContext,
    MatchCount,
    Sha256Hex,
    TreeDepth,
    check_bytes_or_lines,
    checked,
)
from remoteops.files.wire import PathArg

__all__ = ["PathArg", "RemoteFiles"]


class RemoteFiles:
    """The file operations of one :class:`RemoteOps` (``ops.files``), over its agent requests."""

    def __init__(self, agent: AgentRequests, *, ceiling_s: float) -> None:
        self._agent = agent
        self._ceiling_s = ceiling_s

    async def _call(
        self, target: str, kind: int, meta: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        # the agent's own bound (ERROR "timeout", its worker killed) ends the request before this ceiling
        meta = {**meta, "limit_s": round(self._ceiling_s * 0.9, 3)}
        try:
            with anyio.fail_after(self._ceiling_s):
                return await self._agent.agent_request(target, kind, meta, data)
        except TimeoutError:
            raise CommandTimeout(
                f"no answer from the agent within {self._ceiling_s:.0f}s",
                target=target,
                time_limit_s=self._ceiling_s,
                remote_killed=False,
            ) from None

    async def stat(
        self, target: str, path: PathArg, *, sha256: bool = False, follow: bool = False
    ) -> FileInfo:
        """Type, size, mode, owner, mtime and link target of ``path`` (a link itself unless ``follow``);
        ``sha256`` adds the content's SHA-256 for a regular file (or a link to one). The metadata needs
        only search permission: when the content cannot be hashed (a file the login user may see but not
        read, not a regular file) ``sha256`` is None and ``sha256_error`` says why."""
        wire = w.wire(path)
        meta, _ = await self._call(target, proto.STAT, {"path": wire, "hash": sha256, "follow": follow})
        with w.malformed(target):
            return w.info(meta, wire)

    async def read(
        self,
        target: str,
        path: PathArg,
        *,
        max_bytes: int,
        offset: int = 0,
        length: int | None = None,
        start_line: int | None = None,
        line_count: int | None = None,
    ) -> FileContent:
        """Bytes [offset, offset + length) of a regular file, or (``start_line`` and/or ``line_count``)
        ``line_count`` whole lines from the 1-based ``start_line`` (default: line 1, to the end); at most
        ``max_bytes``, with the whole file's size and SHA-256; ``truncated`` when the cap cut what was
        asked. Lines end after ``\\n`` (the last may have none); a cap that cuts the lines returns those
        that fit, or the first ``max_bytes`` of a longer first line (``line_count`` 0)."""
        lines = start_line is not None or line_count is not None
        if offset < 0 or (length is not None and length < 0) or max_bytes < 1:
            raise InvalidRequest(field="offset/length", reason="must be >= 0")
        check_bytes_or_lines(offset or None, length, start_line, line_count)  # offset 0: the default
        if (start_line is not None and start_line < 1) or (line_count is not None and line_count < 1):
            raise InvalidRequest(field="start_line/line_count", reason="must be >= 1")
        wire = w.wire(path)
        want = max_bytes if length is None else min(length, max_bytes)
        meta: dict[str, Any] = {"path": wire, "offset": offset, "length": want}
        if lines:
            meta.update(start_line=start_line or 1, line_count=line_count)
        answer, data = await self._call(target, proto.READ, meta)
        text, b64 = shown_path(proto.wire_bytes(wire))
        with w.malformed(target):
            size, first = int(answer["size"]), int(answer["offset"])
            end = min(first, size) + len(data)
            cut = end < size and (length is None or length > max_bytes)
            return FileContent(
                path=text,
                path_b64=b64,
                content=data,
                offset=first,
                size=size,
                sha256=str(answer["sha256"]),
                truncated=bool(answer["truncated"]) if lines else cut,
                remaining=max(size - end, 0),
                start_line=(start_line or 1) if lines else None,
                line_count=int(answer["lines"]) if lines else None,
                more_lines=bool(answer["more_lines"]) if lines else None,
                past_end=bool(answer["past_end"]) if lines else False,
            )

    async def write(
        self,
        target: str,
        path: PathArg,
        content: bytes,
        *,
        mode: int | None = None,
        if_exists: Literal["overwrite", "fail"] = "overwrite",
        expected_sha256: str | None = None,
    ) -> WriteResult:
        """Replace (or create) a regular file atomically; an existing file keeps its mode and owner (where
        permitted) unless ``mode`` is given, a new one gets ``mode`` or the umask's default. A ``mode`` is
        set exactly (fchmod after the owner: setuid, setgid and sticky bits included, no umask)."""
        if mode is not None:
            checked("mode", FileMode, mode)
        if expected_sha256 is not None:
            checked("expected_sha256", Sha256Hex, expected_sha256)
        wire = w.wire(path)
        meta: dict[str, Any] = {"path": wire, "if_exists": if_exists, "mode": mode}
        if expected_sha256 is not None:
            meta["expected_sha256"] = expected_sha256
        answer, _ = await self._call(target, proto.WRITE, meta, content)
        text, b64 = shown_path(proto.wire_bytes(wire))
        with w.malformed(target):
            return WriteResult(
                path=text,
                path_b64=b64,
                sha256=str(answer["sha256"]),
                size=int(answer["size"]),
                created=bool(answer["created"]),
            )

    async def list(
        self, target: str, path: PathArg, *, depth: int = 1, limit: int = 1000, hidden: bool = False
    ) -> ListResult:
        """Entries under a directory (paths relative to it), depth-first, names in byte order, at most
        ``limit``; hidden (dot) names only when asked."""
        checked("depth", TreeDepth, depth)
        if not 1 <= limit <= 100_000:
            raise InvalidRequest(field="depth/limit", reason="depth 1..64, limit 1..100000")
        wire = w.wire(path)
        meta, _ = await self._call(
            target, proto.LIST, {"path": wire, "depth": depth, "limit": limit, "hidden": hidden}
        )
        text, b64 = shown_path(proto.wire_bytes(wire))
        with w.malformed(target):
            return ListResult(
                path=text,
                path_b64=b64,
                entries=[w.info(entry, entry["path"]) for entry in meta["entries"]],
                truncated=bool(meta["truncated"]),
                errors=[
                    ListError(path=w.shown(e["path"]) or "", errno=str(e["errno"])) for e in meta["errors"]
                ],
            )

    async def mkdir(
        self, target: str, path: PathArg, *, parents: bool = False, mode: int | None = None
    ) -> MkdirResult:
        """A directory (``parents``: with missing parents, and no conflict when it exists). Like ``mkdir
        -m``, a ``mode`` is the mode the new directory gets, exactly: setgid, setuid and sticky bits
        included, the umask not applied (set after creation: mkdir(2) drops setgid and applies the umask).
        Without ``mode`` it gets the default (0777 less the umask). Missing parents always get the default
        and a directory that was already there is left as it is (``created`` false); ``mode`` in the result
        is the directory's mode now."""
        if mode is not None:
            checked("mode", FileMode, mode)
        wire = w.wire(path)
        meta, _ = await self._call(target, proto.MKDIR, {"path": wire, "parents": parents, "mode": mode})
        text, b64 = shown_path(proto.wire_bytes(wire))
        with w.malformed(target):
            return MkdirResult(
                path=text, path_b64=b64, created=bool(meta["created"]), mode=f"{int(meta['mode']):04o}"
            )

    async def move(
        self, target: str, source: PathArg, destination: PathArg, *, overwrite: bool = False
    ) -> MoveResult:
        """Rename ``source`` to ``destination``; an existing destination is ``FileConflict`` unless
        ``overwrite``. Across filesystems: copied next to the destination, renamed, then the source
        removed."""
        src, dst = w.wire(source, "source"), w.wire(destination, "destination")
        meta, _ = await self._call(
            target, proto.MOVE, {"source": src, "destination": dst, "overwrite": overwrite}
        )
        with w.malformed(target):
            return MoveResult(
                source=shown_path(proto.wire_bytes(src))[0],
                destination=shown_path(proto.wire_bytes(dst))[0],
                cross_filesystem=bool(meta["cross_filesystem"]),
            )

    async def delete(
        self, target: str, path: PathArg, *, recursive: bool = False, protected: Sequence[PathArg] = ()
    ) -> DeleteResult:
        """Remove a file or link (a directory only with ``recursive``). Refused (``ProtectedPath``, nothing
        removed): ``/``, the login user's home, any ``protected`` path, or a directory holding one."""
        wire = w.wire(path)
        guards = [w.wire(p, "protected") for p in protected]
        meta, _ = await self._call(
            target, proto.DELETE, {"path": wire, "recursive": recursive, "protected": guards}
        )
        text, b64 = shown_path(proto.wire_bytes(wire))
        with w.malformed(target):
            return DeleteResult(path=text, path_b64=b64, type=meta["type"])

    async def patch(
        self, target: str, path: PathArg, hunks: Sequence[Hunk], *, expected_sha256: str | None = None
    ) -> PatchResult:
        """Apply exact-text hunks in order: all are checked against the current content before one atomic
        write (``FileConflict`` naming the first failing hunk leaves the file untouched). The write carries
        the checked content's SHA-256 as its precondition, so a concurrent change is a conflict too."""
        current = await self.read(target, path, max_bytes=MAX_PATCH_BYTES + 1)
        if current.size > MAX_PATCH_BYTES:
            raise FileRequestInvalid(
                f"the file is {current.size} bytes; patches handle files up to {MAX_PATCH_BYTES}",
                target=target,
                path=current.path,
            )
        if expected_sha256 is not None and expected_sha256 != current.sha256:
            raise FileConflict(
                "the file changed",
                target=target,
                path=current.path,
                reason="sha256_mismatch",
                current_sha256=current.sha256,
            )
        content, results = apply_hunks(current.content, list(hunks), target=target, path=current.path)
        wrote = await self.write(target, path, content, expected_sha256=current.sha256)
        return PatchResult(
            path=wrote.path,
            path_b64=wrote.path_b64,
            previous_sha256=current.sha256,
            sha256=wrote.sha256,
            size=wrote.size,
            hunks=results,
        )

    async def find(
        self,
        target: str,
        path: PathArg,
        *,
        name: str | None = None,
        kind: FileKind | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        mtime_min: float | None = None,
        mtime_max: float | None = None,
        depth: int = 64,
        limit: int = 1000,
        hidden: bool = True,
    ) -> ListResult:
        """Entries under a directory matching a name glob (``fnmatch``, on the base name), type, size and
        mtime bounds, in ``list`` order, at most ``limit`` (``truncated``)."""
        checked("depth", TreeDepth, depth)
        if not 1 <= limit <= 100_000:
            raise InvalidRequest(field="depth/limit", reason="depth 1..64, limit 1..100000")
        wire = w.wire(path)
        meta: dict[str, Any] = {"path": wire, "depth": depth, "limit": limit, "hidden": hidden, "type": kind}
        bounds = {"min_size": min_size, "max_size": max_size, "mtime_min": mtime_min, "mtime_max": mtime_max}
        meta.update({key: value for key, value in bounds.items() if value is not None})
        if name is not None:
            meta["name"] = w.wire(name, "name")
        answer, _ = await self._call(target, proto.FIND, meta)
        text, b64 = shown_path(proto.wire_bytes(wire))
        with w.malformed(target):
            return ListResult(
                path=text,
                path_b64=b64,
                entries=[w.info(entry, entry["path"]) for entry in answer["entries"]],
                truncated=bool(answer["truncated"]),
                errors=[
                    ListError(path=w.shown(e["path"]) or "", errno=str(e["errno"])) for e in answer["errors"]
                ],
            )

    async def grep(
        self,
        target: str,
        path: PathArg,
        pattern: str,
        *,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        ignore_case: bool = False,
        context: int = 0,
        depth: int = 64,
        max_matches: int = 200,
        max_bytes: int = 65536,
        hidden: bool = False,
    ) -> GrepResult:
        """Lines matching ``pattern`` (Python ``re``, on bytes) in the regular files under ``path`` (or in
        that one file); ``include``/``exclude`` are globs on base names; binary files are skipped (reported
        in ``skipped``); bounded by ``max_matches`` and ``max_bytes`` (``truncated``)."""
        checked("context", GrepContext, context)
        checked("max_matches", MatchCount, max_matches)
        checked("depth", TreeDepth, depth)
        wire = w.wire(path)
        meta = {
            "path": wire,
            "pattern": pattern,
            "include": [w.wire(g, "include") for g in include],
            "exclude": [w.wire(g, "exclude") for g in exclude],
            "ignore_case": ignore_case,
            "context": context,
            "depth": depth,
            "max_matches": max_matches,
            "max_bytes": max_bytes,
            "hidden": hidden,
        }
        answer, _ = await self._call(target, proto.GREP, meta)
        with w.malformed(target):
            return GrepResult(
                path=shown_path(proto.wire_bytes(wire))[0],
                matches=[
                    GrepMatch(
                        path=w.shown(m["path"]) or "",
                        line=int(m["line"]),
                        text=w.shown(m["text"]) or "",
                        before=[w.shown(t) or "" for t in m["before"]],
                        after=[w.shown(t) or "" for t in m["after"]],
                    )
                    for m in answer["matches"]
                ],
                skipped=[
                    GrepSkipped(path=w.shown(k["path"]) or "", reason=str(k["reason"]))
                    for k in answer["skipped"]
                ],
                files_searched=int(answer["files_searched"]),
                truncated=bool(answer["truncated"]),
                errors=[
                    ListError(path=w.shown(e["path"]) or "", errno=str(e["errno"])) for e in answer["errors"]
                ],
            )
