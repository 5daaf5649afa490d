"""``remote_stat`` and ``remote_read`` (inspect): thin adapters over :meth:`remoteops.RemoteOps.files`
``stat`` and ``read``.

``remote_read`` takes a byte range (``offset``/``length``) or whole lines (``start_line``/``line_count``),
never both; either way at most the transport's output cap (``truncated`` with the ``remaining`` size),
with the whole file's size and SHA-256. ``utf-8`` reads refuse bytes that are not UTF-8 unless
``errors: "replace"``, and never end inside a character the cap cut.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Output
from gateway.tools._registry import READ, ToolGroup
from gateway.tools.files_paths import NEEDS_AGENT, PathIn
from remoteops import FileInfo, check_bytes_or_lines

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs


class StatIn(PathIn):
    sha256: bool = Field(
        False, description="Also compute the SHA-256 of a regular file's content (a file that cannot be "
        "read still gets its metadata: sha256 null, sha256_error permission_denied).",
    )  # fmt: skip
    follow: bool = Field(False, description="Describe what a symlink points to instead of the link.")


class StatOut(FileInfo):
    target: str


class ReadIn(PathIn):
    encoding: Literal["utf-8", "base64"] = "utf-8"
    errors: Literal["strict", "replace"] = Field(
        "strict", description="utf-8 only: refuse bytes that are not UTF-8 (strict) or replace them."
    )
    offset: int | None = Field(None, ge=0, description="First byte to return (default 0).")
    length: int | None = Field(None, ge=0, description="Bytes to return (default: up to the cap).")
    start_line: int | None = Field(
        None, ge=1, description="Read whole lines instead, from this 1-based line (default 1). "
        "Not with offset or length.",
    )  # fmt: skip
    line_count: int | None = Field(
        None, ge=1, description="Lines to return (default: to the end, up to the cap). Not with offset "
        "or length.",
    )  # fmt: skip

    @field_validator("start_line", "line_count")
    @classmethod
    def _bytes_or_lines(cls, value: int | None, info: ValidationInfo) -> int | None:
        start_line, line_count = (value, None) if info.field_name == "start_line" else (None, value)
        check_bytes_or_lines(info.data.get("offset"), info.data.get("length"), start_line, line_count)
        return value


class ReadOut(Output):
    target: str
    path: str
    path_b64: str | None = None
    content: str | None = Field(
        None, description="Not here in a result: the content travels once, as the result's second text "
        "block (content[1].text), the place every client shows the model; the first block is a summary.",
    )  # fmt: skip
    encoding: Literal["utf-8", "base64"]
    offset: int = Field(description="The file's byte offset where content starts (line reads too).")
    length: int = Field(description="Bytes of the file returned in content.")
    size: int = Field(description="The whole file's size in bytes.")
    sha256: str = Field(description="SHA-256 of the whole file.")
    truncated: bool = Field(description="The size cap cut the returned range.")
    remaining: int = Field(description="Bytes of the file after the returned range.")
    start_line: int | None = Field(None, description="Line reads: the 1-based number of the first line.")
    line_count: int | None = Field(
        None, description="Line reads: whole lines in content (0 when the cap cut the first line: "
        "continue by bytes from offset + length).",
    )  # fmt: skip
    more_lines: bool | None = Field(None, description="Line reads: the file goes on after content.")
    past_end: bool = Field(False, description="Line reads: the file has fewer lines than start_line.")


def _decode(data: bytes, args: ReadIn, truncated: bool, offset: int) -> tuple[str, int]:
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
            details={"offset": offset + exc.start},
        ) from None


def _render_read(out: ReadOut) -> str:
    """The summary line, the result's first text block; the content itself is the second
    (``text_field``), so that a client that shows the model only the text content (not
    ``structuredContent``) still hands it the file, once."""
    more = f", {out.remaining} more bytes (truncated)" if out.truncated else ""
    span = f"{out.length} of {out.size} bytes from {out.offset}"
    if out.past_end:
        span = f"no line {out.start_line} (the file has fewer lines), {out.size} bytes"
    elif out.start_line is not None:
        count, first = out.line_count or 0, out.start_line
        lines = f"lines {first}-{first + count - 1}" if count > 1 else f"line {first}"
        lines = lines if count else f"part of line {first}"
        span = f"{lines} ({span}){', more lines follow' if out.more_lines else ''}"
    head = f"{out.path}: {span}{more}; sha256 {out.sha256}"
    return head if out.encoding == "utf-8" else f"{head} (base64)"


@_tools.tool(
    "remote_stat",
    "Stat a remote path",
    "Type, size, mode, owner, group, mtime and symlink target of a path on a target (optionally the "
    "content's SHA-256; sha256_error says why it is missing, such as permission_denied). Paths are data: "
    "any bytes, via path_b64." + NEEDS_AGENT,
)
async def remote_stat(ctx: ToolContext, args: StatIn) -> StatOut:
    info = await ctx.runtime.remote.files.stat(
        args.target, args.raw_path(), sha256=args.sha256, follow=args.follow
    )
    return StatOut(target=args.target, **info.model_dump())


@_tools.tool(
    "remote_read",
    "Read a remote file",
    "Read a regular file (utf-8 or base64): a byte range (offset, length) or whole lines (start_line, "
    "line_count; the result says which lines, more_lines, and their byte offset), capped at the output cap "
    "with truncated and remaining; returns the whole file's size and SHA-256. The content is the "
    "result's second text block (a summary line is the first)." + NEEDS_AGENT,
    render=_render_read,
    text_field="content",
)
async def remote_read(ctx: ToolContext, args: ReadIn) -> ReadOut:
    cap = ctx.runtime.settings.transport.output_cap_bytes
    got = await ctx.runtime.remote.files.read(
        args.target,
        args.raw_path(),
        max_bytes=cap,
        offset=args.offset or 0,
        length=args.length,
        start_line=args.start_line,
        line_count=args.line_count,
    )
    text, used = _decode(got.content, args, got.truncated, got.offset)
    return ReadOut(
        target=args.target,
        path=got.path,
        path_b64=got.path_b64,
        content=text,
        encoding=args.encoding,
        offset=got.offset,
        length=used,
        size=got.size,
        sha256=got.sha256,
        truncated=got.truncated or used < len(got.content),
        remaining=got.remaining + len(got.content) - used,
        start_line=got.start_line,
        line_count=got.line_count,
        more_lines=got.more_lines,
        past_end=got.past_end,
    )
