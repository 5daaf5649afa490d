"""`remote_find` and `remote_grep`: thin adapters over `RemoteOps.files` (agent requests)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway._context import ToolContext
from gateway.tools._registry import READ, ToolGroup
from gateway.tools.files_paths import PathIn
from remoteops import GrepContext, GrepResult, ListResult, MatchCount, TreeDepth

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs

_Kind = Literal["file", "directory", "symlink", "fifo", "socket", "char", "block"]


class FindIn(PathIn):
    name: str | None = Field(None, min_length=1, description="Glob on the base name (fnmatch: *, ?, [..]).")
    type: _Kind | None = Field(None, description="Only entries of this type.")
    min_size: int | None = Field(None, ge=0, description="Only entries of at least this many bytes.")
    max_size: int | None = Field(None, ge=0, description="Only entries of at most this many bytes.")
    mtime_min: float | None = Field(None, description="Only entries modified at or after (epoch seconds).")
    mtime_max: float | None = Field(None, description="Only entries modified at or before (epoch seconds).")
    depth: TreeDepth = Field(64, description="How deep to descend (1: the directory's entries).")
    limit: int = Field(1000, ge=1, le=10_000, description="At most this many results (truncated says more).")
    hidden: bool = Field(True, description="Include names starting with a dot.")


class FindOut(ListResult):
    target: str


class GrepIn(PathIn):
    pattern: str = Field(min_length=1, max_length=4096, description="A Python regular expression (re).")
    include: list[str] = Field(default_factory=list, description="Only files whose base name matches one.")
    exclude: list[str] = Field(default_factory=list, description="Skip files whose base name matches one.")
    ignore_case: bool = False
    context: GrepContext = Field(0, description="Lines of context before and after each match.")
    depth: TreeDepth = 64
    max_matches: MatchCount = 200
    hidden: bool = Field(False, description="Search names starting with a dot too.")


class GrepOut(GrepResult):
    target: str


def _render_grep(out: GrepOut) -> str:
    lines = [f"{m.path}:{m.line}: {m.text}" for m in out.matches]
    lines += [f"skipped {s.path} ({s.reason})" for s in out.skipped]
    if out.truncated:
        lines.append("… truncated")
    return "\n".join(lines) or "no matches"


@_tools.tool(
    "remote_find",
    "Find remote files",
    "Entries under a directory matching a name glob, type, size and mtime bounds, to a max depth, in "
    "deterministic order, bounded by limit with truncated. Needs the agent.",
)
async def remote_find(ctx: ToolContext, args: FindIn) -> FindOut:
    out = await ctx.runtime.remote.files.find(
        args.target,
        args.raw_path(),
        name=args.name,
        kind=args.type,
        min_size=args.min_size,
        max_size=args.max_size,
        mtime_min=args.mtime_min,
        mtime_max=args.mtime_max,
        depth=args.depth,
        limit=args.limit,
        hidden=args.hidden,
    )
    return FindOut(target=args.target, **out.model_dump())


@_tools.tool(
    "remote_grep",
    "Search remote files",
    "Lines matching a Python regular expression in the files under a path (include/exclude globs, context "
    "lines, line numbers); binary files are skipped and listed; matches and bytes are bounded (truncated). "
    "Needs the agent.",
    render=_render_grep,
)
async def remote_grep(ctx: ToolContext, args: GrepIn) -> GrepOut:
    out = await ctx.runtime.remote.files.grep(
        args.target,
        args.raw_path(),
        args.pattern,
        include=args.include,
        exclude=args.exclude,
        ignore_case=args.ignore_case,
        context=args.context,
        depth=args.depth,
        max_matches=args.max_matches,
        max_bytes=ctx.runtime.settings.transport.output_cap_bytes,
        hidden=args.hidden,
    )
    return GrepOut(target=args.target, **out.model_dump())
