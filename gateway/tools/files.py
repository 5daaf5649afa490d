"""Structured remote files: thin adapters over :attr:`remoteops.RemoteOps.files` (agent requests).

Paths are given as ``path`` (text) or ``path_b64`` (the exact bytes, base64, for names that are not UTF-8);
contents travel as ``content`` with ``encoding`` (``utf-8`` or ``base64``). Contents above the MCP argument
cap (``server.max_argument_bytes``) are refused by the dispatcher (use the transfer tools for big files);
reads (``files_read``: byte ranges or lines) are capped at the transport's output cap.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from gateway._catalog import AnySpec
from gateway._context import ToolContext
from gateway.tools import files_read
from gateway.tools._base import Input
from gateway.tools._registry import CHANGE, READ, TEARDOWN, ToolGroup
from gateway.tools.files_paths import NEEDS_AGENT, PathIn, TargetName, b64_argument
from remoteops import (
    DeleteResult,
    FileMode,
    Hunk,
    ListResult,
    MkdirResult,
    MoveResult,
    PatchResult,
    Sha256Hex,
    TreeDepth,
    WriteResult,
)

__all__ = ["SPECS"]

_tools = ToolGroup(CHANGE)


class WriteIn(PathIn):
    content: str = Field(description="The new content, encoded as encoding says.")
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: FileMode | None = Field(
        None, description="Permission bits as a number (e.g. 420 = 0o644), set exactly "
        "(setuid/setgid/sticky included, no umask); default: an existing file keeps its mode, a new one "
        "gets the umask's default.",
    )  # fmt: skip
    if_exists: Literal["overwrite", "fail"] = "overwrite"
    expected_sha256: Sha256Hex | None = Field(
        None, description="Refuse (conflict) unless the file's current SHA-256 "
        "is this (read it with remote_read or remote_stat first).",
    )  # fmt: skip

    def content_bytes(self) -> bytes:
        if self.encoding == "utf-8":
            return self.content.encode("utf-8")
        return b64_argument(self.content, "content")


class WriteOut(WriteResult):
    target: str


class HunkIn(Input):
    old: str = Field(min_length=1, description="Exact text to replace (whitespace and newlines included).")
    new: str = Field(description="Its replacement.")
    count: int = Field(1, ge=1, description="How many times old must occur (all are replaced).")


class PatchIn(PathIn):
    hunks: list[HunkIn] = Field(min_length=1, max_length=200, description="Applied in order.")
    expected_sha256: Sha256Hex | None = Field(
        None, description="Refuse (conflict) unless the file's SHA-256 is this."
    )


class PatchOut(PatchResult):
    target: str


class ListIn(PathIn):
    depth: TreeDepth = Field(1, description="1: the directory's entries; 2: and theirs, ...")
    limit: int = Field(1000, ge=1, le=10_000, description="At most this many entries (truncated says more).")
    hidden: bool = Field(False, description="Include names starting with a dot.")


class ListOut(ListResult):
    target: str


class MkdirIn(PathIn):
    parents: bool = Field(False, description="Create missing parents; an existing directory is fine.")
    mode: FileMode | None = Field(
        None, description="Permission bits as a number (e.g. 1533 = 0o2775): the new "
        "directory gets exactly this mode, setgid/setuid/sticky included and the umask not applied, like "
        "mkdir -m. Default: 0o777 less the umask. Missing parents get the default; an existing directory "
        "is left as it is.",
    )  # fmt: skip


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


def _render_write(out: WriteOut) -> str:
    return f"{'created' if out.created else 'replaced'} {out.path}: {out.size} bytes, sha256 {out.sha256}"


def _render_patch(out: PatchOut) -> str:
    replaced = sum(h.replaced for h in out.hunks)
    removed, added = sum(h.lines_removed for h in out.hunks), sum(h.lines_added for h in out.hunks)
    return (
        f"patched {out.path}: {len(out.hunks)} hunk(s), {replaced} replacement(s), -{removed} +{added} "
        f"line(s); {out.size} bytes, sha256 {out.sha256}"
    )


def _render_list(out: ListOut) -> str:
    lines = [f"{e.type[0]} {e.mode} {e.size:>10} {e.path}" for e in out.entries]
    if out.truncated:
        lines.append("… truncated")
    return "\n".join(lines) or "(empty)"


@_tools.tool(
    "remote_list",
    "List a remote directory",
    "Entries of a directory (optionally recursive to a depth), depth-first in byte order of names, bounded "
    "by limit with truncated; hidden names only when asked." + NEEDS_AGENT,
    kind=READ,
    render=_render_list,
)
async def remote_list(ctx: ToolContext, args: ListIn) -> ListOut:
    out = await ctx.runtime.remote.files.list(
        args.target, args.raw_path(), depth=args.depth, limit=args.limit, hidden=args.hidden
    )
    return ListOut(target=args.target, **out.model_dump())


@_tools.tool(
    "remote_write",
    "Write a remote file atomically",
    "Replace or create a file atomically (temporary file in the same directory, fsync, rename): old or "
    "new content, never a mix. if_exists fail and expected_sha256 give conflict. Content above the "
    "argument cap: use the transfer tools. transport_lost: it may have been written; remote_stat with "
    "sha256 tells." + NEEDS_AGENT,
    render=_render_write,
    idempotent=True,
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


@_tools.tool(
    "remote_patch",
    "Patch a remote file",
    "Replace exact text in a file: hunks [{old, new, count}] applied in order, each old occurring exactly "
    "count times (default 1). All are checked before one atomic write; a failing hunk is a conflict "
    "naming it (details.hunk) and nothing is written." + NEEDS_AGENT,
    render=_render_patch,
)
async def remote_patch(ctx: ToolContext, args: PatchIn) -> PatchOut:
    hunks = [Hunk(h.old.encode("utf-8"), h.new.encode("utf-8"), h.count) for h in args.hunks]
    out = await ctx.runtime.remote.files.patch(
        args.target, args.raw_path(), hunks, expected_sha256=args.expected_sha256
    )
    return PatchOut(target=args.target, **out.model_dump())


@_tools.tool(
    "remote_mkdir",
    "Make a remote directory",
    "Create a directory (parents: with missing parents, an existing one is fine). A mode is applied "
    "exactly, setgid and sticky included (like mkdir -m)." + NEEDS_AGENT,
    destructive=False,
)
async def remote_mkdir(ctx: ToolContext, args: MkdirIn) -> MkdirOut:
    out = await ctx.runtime.remote.files.mkdir(
        args.target, args.raw_path(), parents=args.parents, mode=args.mode
    )
    return MkdirOut(target=args.target, **out.model_dump())


@_tools.tool(
    "remote_move",
    "Move a remote path",
    "Rename a file or directory; an existing destination is a conflict unless overwrite. Across "
    "filesystems it is copied next to the destination, renamed, then removed." + NEEDS_AGENT,
)
async def remote_move(ctx: ToolContext, args: MoveIn) -> MoveOut:
    source = args.source if args.source is not None else b64_argument(args.source_b64 or "", "source_b64")
    dest = (
        args.destination
        if args.destination is not None
        else b64_argument(args.destination_b64 or "", "destination_b64")
    )
    out = await ctx.runtime.remote.files.move(args.target, source, dest, overwrite=args.overwrite)
    return MoveOut(target=args.target, **out.model_dump())


@_tools.tool(
    "remote_delete",
    "Delete a remote path",
    "Delete a file or link; a directory only with recursive. Refuses /, the login user's home and the "
    "target's protected_paths (and directories holding them)." + NEEDS_AGENT,
    kind=TEARDOWN,
)
async def remote_delete(ctx: ToolContext, args: DeleteIn) -> DeleteOut:
    target = ctx.runtime.remote.target(args.target)
    out = await ctx.runtime.remote.files.delete(
        args.target, args.raw_path(), recursive=args.recursive, protected=target.protected_paths
    )
    return DeleteOut(target=args.target, **out.model_dump())


SPECS: list[AnySpec] = [*files_read.SPECS, *_tools.specs]
"""Every file tool, in catalog order (stat and read first)."""
