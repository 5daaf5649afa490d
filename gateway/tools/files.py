"""Structured remote files: thin adapters over :attr:`remoteops.RemoteOps.files` (agent requests).

Paths are given as ``path`` (text) or ``path_b64`` (the exact bytes, base64, for names that are not UTF-8);
contents travel as ``content`` with ``encoding`` (``utf-8`` or ``base64``). Contents above the MCP argument
cap (``server.max_argument_bytes``) are refused by the dispatcher (use the transfer tools for big files);
reads are capped at the transport's output cap and say ``truncated`` with the ``remaining`` size.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from gateway._catalog import REMOTE_READ, Toolset, ToolSpec
from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Input, Output
from remoteops import (
    DeleteResult,
    FileInfo,
    Hunk,
    ListResult,
    MkdirResult,
    MoveResult,
    PatchResult,
    WriteResult,
)

__all__ = ["SPECS"]

TargetName = Annotated[str, Field(min_length=1, max_length=128, description="A configured target name.")]
_PATH = "The path on the target (text). Give this or path_b64."
_PATH_B64 = "The path's exact bytes, base64 (for names that are not valid UTF-8). Give this or path."


def _b64(value: str, field: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR, f"{field} is not valid base64", details={"field": field}
        ) from None


class PathIn(Input):
    target: TargetName
    path: str | None = Field(None, min_length=1, description=_PATH)
    path_b64: str | None = Field(None, min_length=1, description=_PATH_B64)

    @model_validator(mode="after")
    def _one_path(self) -> Self:
        if (self.path is None) == (self.path_b64 is None):
            raise ValueError("give exactly one of path or path_b64")
        return self

    def raw_path(self) -> str | bytes:
        return self.path if self.path is not None else _b64(self.path_b64 or "", "path_b64")


class StatIn(PathIn):
    sha256: bool = Field(False, description="Also compute the SHA-256 of a regular file's content.")
    follow: bool = Field(False, description="Describe what a symlink points to instead of the link.")


class ReadIn(PathIn):
    encoding: Literal["utf-8", "base64"] = "utf-8"
    errors: Literal["strict", "replace"] = Field(
        "strict", description="utf-8 only: refuse bytes that are not UTF-8 (strict) or replace them."
    )
    offset: int = Field(0, ge=0, description="First byte to return.")
    length: int | None = Field(None, ge=0, description="Bytes to return (default: up to the cap).")


class ReadOut(Output):
    target: str
    path: str
    path_b64: str | None = None
    content: str
    encoding: Literal["utf-8", "base64"]
    offset: int
    length: int = Field(description="Bytes of the file returned in content.")
    size: int = Field(description="The whole file's size in bytes.")
    sha256: str = Field(description="SHA-256 of the whole file.")
    truncated: bool = Field(description="The size cap cut the returned range.")
    remaining: int = Field(description="Bytes of the file after the returned range.")


class WriteIn(PathIn):
    content: str = Field(description="The new content, encoded as encoding says.")
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: int | None = Field(
        None, ge=0, le=0o7777, description="Permission bits as a number (e.g. 420 = 0o644); default: "
        "an existing file keeps its mode, a new one gets the umask's default.",
    )  # fmt: skip
    if_exists: Literal["overwrite", "fail"] = "overwrite"
    expected_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="Refuse (conflict) unless the file's current SHA-256 "
        "is this (read it with remote_read or remote_stat first).",
    )  # fmt: skip

    def content_bytes(self) -> bytes:
        if self.encoding == "utf-8":
            return self.content.encode("utf-8")
        return _b64(self.content, "content")


class WriteOut(WriteResult):
    target: str


class HunkIn(Input):
    old: str = Field(min_length=1, description="Exact text to replace (whitespace and newlines included).")
    new: str = Field(description="Its replacement.")
    count: int = Field(1, ge=1, description="How many times old must occur (all are replaced).")


class PatchIn(PathIn):
    hunks: list[HunkIn] = Field(min_length=1, max_length=200, description="Applied in order.")
    expected_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="Refuse (conflict) unless the file's SHA-256 is this."
    )


class PatchOut(PatchResult):
    target: str


class ListIn(PathIn):
    depth: int = Field(1, ge=1, le=64, description="1: the directory's entries; 2: and theirs, ...")
    limit: int = Field(1000, ge=1, le=10_000, description="At most this many entries (truncated says more).")
    hidden: bool = Field(False, description="Include names starting with a dot.")


class ListOut(ListResult):
    target: str


class StatOut(FileInfo):
    target: str


class MkdirIn(PathIn):
    parents: bool = Field(False, description="Create missing parents; an existing directory is fine.")
    mode: int = Field(0o777, ge=0, le=0o7777, description="Permission bits (the umask applies).")


class MkdirOut(MkdirResult):
    target: str


class MoveIn(Input):
    target: TargetName
    source: str | None = Field(None, min_length=1, description="The path to move (text).")
    source_b64: str | None = Field(None, min_length=1, description="The source's exact bytes, base64.")
    destination: str | None = Field(None, min_length=1, description="The new path (text).")
    destination_b64: str | None = Field(None, min_length=1, description="The destination's bytes, base64.")
    overwrite: bool = Field(False, description="Replace an existing destination (else: conflict).")

    @model_validator(mode="after")
    def _one_each(self) -> Self:
        if (self.source is None) == (self.source_b64 is None):
            raise ValueError("give exactly one of source or source_b64")
        if (self.destination is None) == (self.destination_b64 is None):
            raise ValueError("give exactly one of destination or destination_b64")
        return self


class MoveOut(MoveResult):
    target: str


class DeleteIn(PathIn):
    recursive: bool = Field(False, description="Required to delete a directory and everything in it.")


class DeleteOut(DeleteResult):
    target: str


def _decode(data: bytes, args: ReadIn, truncated: bool) -> tuple[str, int]:
    """The content as text and how many bytes it stands for."""
    if args.encoding == "base64":
        return base64.b64encode(data).decode("ascii"), len(data)
    try:
        return data.decode("utf-8"), len(data)
    except UnicodeDecodeError as exc:
        cut = exc.reason == "unexpected end of data" and exc.end == len(data)
        if cut and (truncated or args.length is not None):
            # the range ends inside a character: return the whole characters before it
            return data[: exc.start].decode("utf-8", args.errors), exc.start
        if args.errors == "replace":
            return data.decode("utf-8", "replace"), len(data)
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR,
            "the file is not valid UTF-8: read it with encoding base64, or errors replace",
            details={"offset": args.offset + exc.start},
        ) from None


async def remote_stat(ctx: ToolContext, args: StatIn) -> StatOut:
    info = await ctx.runtime.remote.files.stat(
        args.target, args.raw_path(), sha256=args.sha256, follow=args.follow
    )
    return StatOut(target=args.target, **info.model_dump())


async def remote_read(ctx: ToolContext, args: ReadIn) -> ReadOut:
    cap = ctx.runtime.settings.transport.output_cap_bytes
    got = await ctx.runtime.remote.files.read(
        args.target, args.raw_path(), max_bytes=cap, offset=args.offset, length=args.length
    )
    text, used = _decode(got.content, args, got.truncated)
    remaining = got.remaining + len(got.content) - used
    return ReadOut(
        target=args.target,
        path=got.path,
        path_b64=got.path_b64,
        content=text,
        encoding=args.encoding,
        offset=args.offset,
        length=used,
        size=got.size,
        sha256=got.sha256,
        truncated=got.truncated or used < len(got.content),
        remaining=remaining,
    )


async def remote_write(ctx: ToolContext, args: WriteIn) -> WriteOut:
    # content above server.max_argument_bytes never gets here: the dispatcher refuses it (validation_error
    # naming the argument); big files go through the transfer tools
    out = await ctx.runtime.remote.files.write(
        args.target,
        args.raw_path(),
        args.content_bytes(),
        mode=args.mode,
        if_exists=args.if_exists,
        expected_sha256=args.expected_sha256,
    )
    return WriteOut(target=args.target, **out.model_dump())


async def remote_patch(ctx: ToolContext, args: PatchIn) -> PatchOut:
    hunks = [Hunk(h.old.encode("utf-8"), h.new.encode("utf-8"), h.count) for h in args.hunks]
    out = await ctx.runtime.remote.files.patch(
        args.target, args.raw_path(), hunks, expected_sha256=args.expected_sha256
    )
    return PatchOut(target=args.target, **out.model_dump())


async def remote_list(ctx: ToolContext, args: ListIn) -> ListOut:
    out = await ctx.runtime.remote.files.list(
        args.target, args.raw_path(), depth=args.depth, limit=args.limit, hidden=args.hidden
    )
    return ListOut(target=args.target, **out.model_dump())


async def remote_mkdir(ctx: ToolContext, args: MkdirIn) -> MkdirOut:
    out = await ctx.runtime.remote.files.mkdir(
        args.target, args.raw_path(), parents=args.parents, mode=args.mode
    )
    return MkdirOut(target=args.target, **out.model_dump())


async def remote_move(ctx: ToolContext, args: MoveIn) -> MoveOut:
    source = args.source if args.source is not None else _b64(args.source_b64 or "", "source_b64")
    dest = (
        args.destination
        if args.destination is not None
        else _b64(args.destination_b64 or "", "destination_b64")
    )
    out = await ctx.runtime.remote.files.move(args.target, source, dest, overwrite=args.overwrite)
    return MoveOut(target=args.target, **out.model_dump())


async def remote_delete(ctx: ToolContext, args: DeleteIn) -> DeleteOut:
    target = ctx.runtime.remote.target(args.target)
    out = await ctx.runtime.remote.files.delete(
        args.target, args.raw_path(), recursive=args.recursive, protected=target.protected_paths
    )
    return DeleteOut(target=args.target, **out.model_dump())


def _render_read(out: ReadOut) -> str:
    """The content itself follows the header line: a client that shows the model only the text content
    (not ``structuredContent``) must still hand it the file."""
    more = f", {out.remaining} more bytes (truncated)" if out.truncated else ""
    head = f"{out.path}: {out.length} of {out.size} bytes from {out.offset}{more}; sha256 {out.sha256}"
    return f"{head}\n{out.content}" if out.encoding == "utf-8" else f"{head} (base64)\n{out.content}"


def _render_write(out: WriteOut) -> str:
    return f"{'created' if out.created else 'replaced'} {out.path}: {out.size} bytes, sha256 {out.sha256}"


def _render_list(out: ListOut) -> str:
    lines = [f"{e.type[0]} {e.mode} {e.size:>10} {e.path}" for e in out.entries]
    if out.truncated:
        lines.append("… truncated")
    return "\n".join(lines) or "(empty)"


_CHANGES: dict[str, Any] = {"read_only": False, "open_world": True}
_NEEDS = " Needs the agent (python3 >= 3.8 on the target)."

SPECS: list[ToolSpec[Any, Any]] = [
    ToolSpec(
        name="remote_stat",
        title="Stat a remote path",
        description="Type, size, mode, owner, group, mtime and symlink target of a path on a target "
        "(optionally the content's SHA-256). Paths are data: any bytes, via path_b64." + _NEEDS,
        input_model=StatIn,
        output_model=StatOut,
        handler=remote_stat,
        **REMOTE_READ,
    ),
    ToolSpec(
        name="remote_read",
        title="Read a remote file",
        description="Read a regular file (utf-8 or base64, a byte range), capped at the output cap with "
        "truncated and remaining; returns the whole file's size and SHA-256." + _NEEDS,
        input_model=ReadIn,
        output_model=ReadOut,
        handler=remote_read,
        render=_render_read,
        **REMOTE_READ,
    ),
    ToolSpec(
        name="remote_list",
        title="List a remote directory",
        description="Entries of a directory (optionally recursive to a depth), depth-first in byte order "
        "of names, bounded by limit with truncated; hidden names only when asked." + _NEEDS,
        input_model=ListIn,
        output_model=ListOut,
        handler=remote_list,
        render=_render_list,
        **REMOTE_READ,
    ),
    ToolSpec(
        name="remote_write",
        title="Write a remote file atomically",
        description="Replace or create a file atomically (temporary file in the same directory, fsync, "
        "rename): old or new content, never a mix. if_exists fail and expected_sha256 give conflict. "
        "Content above the argument cap: use the transfer tools. transport_lost: it may have been "
        "written; remote_stat with sha256 tells." + _NEEDS,
        input_model=WriteIn,
        output_model=WriteOut,
        toolset=Toolset.EXECUTE,
        destructive=True,
        idempotent=True,
        handler=remote_write,
        render=_render_write,
        **_CHANGES,
    ),
    ToolSpec(
        name="remote_patch",
        title="Patch a remote file",
        description="Replace exact text in a file: hunks [{old, new, count}] applied in order, each old "
        "occurring exactly count times (default 1). All are checked before one atomic write; a failing "
        "hunk is a conflict naming it (details.hunk) and nothing is written." + _NEEDS,
        input_model=PatchIn,
        output_model=PatchOut,
        toolset=Toolset.EXECUTE,
        destructive=True,
        idempotent=False,
        handler=remote_patch,
        **_CHANGES,
    ),
    ToolSpec(
        name="remote_mkdir",
        title="Make a remote directory",
        description="Create a directory (parents: with missing parents, an existing one is fine)." + _NEEDS,
        input_model=MkdirIn,
        output_model=MkdirOut,
        toolset=Toolset.EXECUTE,
        destructive=False,
        idempotent=False,
        handler=remote_mkdir,
        **_CHANGES,
    ),
    ToolSpec(
        name="remote_move",
        title="Move a remote path",
        description="Rename a file or directory; an existing destination is a conflict unless overwrite. "
        "Across filesystems it is copied next to the destination, renamed, then removed." + _NEEDS,
        input_model=MoveIn,
        output_model=MoveOut,
        toolset=Toolset.EXECUTE,
        destructive=True,
        idempotent=False,
        handler=remote_move,
        **_CHANGES,
    ),
    ToolSpec(
        name="remote_delete",
        title="Delete a remote path",
        description="Delete a file or link; a directory only with recursive. Refuses /, the login user's "
        "home and the target's protected_paths (and directories holding them)." + _NEEDS,
        input_model=DeleteIn,
        output_model=DeleteOut,
        toolset=Toolset.TEARDOWN,
        destructive=True,
        idempotent=False,
        handler=remote_delete,
        **_CHANGES,
    ),
]
