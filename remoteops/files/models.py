"""Records of the structured file operations (``remoteops.files.operations``).

Paths on a target are bytes. Every record shows a path as text (invalid UTF-8 replaced, for reading) and,
when that text is not the exact name, also as ``path_b64`` (the exact bytes, base64): feed that back as a
bytes path to name the same file.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DeleteResult",
    "FileContent",
    "FileInfo",
    "FileKind",
    "GrepMatch",
    "GrepResult",
    "GrepSkipped",
    "ListError",
    "ListResult",
    "MkdirResult",
    "MoveResult",
    "WriteResult",
    "shown_path",
]

FileKind = Literal["file", "directory", "symlink", "fifo", "socket", "char", "block", "unknown"]
_FROZEN = ConfigDict(frozen=True)


def shown_path(raw: bytes) -> tuple[str, str | None]:
    """(text for display, base64 of the exact bytes when the text is not exact)."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), base64.b64encode(raw).decode("ascii")


class FileInfo(BaseModel):
    model_config = _FROZEN

    path: str = Field(description="The path (relative to the listed directory in a listing).")
    path_b64: str | None = Field(None, description="The exact path bytes (base64) when not valid UTF-8.")
    type: FileKind
    size: int
    mode: str = Field(description="Permission bits in octal, e.g. '0644'.")
    uid: int
    gid: int
    owner: str | None
    group: str | None
    mtime: float = Field(description="Modification time, seconds since the epoch.")
    symlink_target: str | None = None
    sha256: str | None = Field(None, description="SHA-256 of the content (regular files, when asked).")
    sha256_error: str | None = Field(
        None,
        description="Why sha256 is null although it was asked: permission_denied (the file can be seen but "
        "not read), not_a_regular_file, not_found (a dangling link), or an errno name.",
    )


class FileContent(BaseModel):
    """What ``read`` returns: ``content`` is bytes [offset, offset + len(content)) of the file. A read by
    lines also says which: ``line_count`` whole lines from line ``start_line`` (``offset`` is where that
    line starts); continue at line ``start_line + line_count`` or at byte ``offset + len(content)``."""

    model_config = _FROZEN

    path: str
    path_b64: str | None = None
    content: bytes
    offset: int
    size: int = Field(description="The whole file's size in bytes.")
    sha256: str = Field(description="SHA-256 of the whole file.")
    truncated: bool = Field(description="More bytes follow the returned range than were asked or allowed.")
    remaining: int = Field(description="Bytes of the file after the returned range.")
    start_line: int | None = Field(None, description="Line reads: the 1-based number of the first line.")
    line_count: int | None = Field(
        None, description="Line reads: whole lines in content (0 when the size cap cut the first line)."
    )
    more_lines: bool | None = Field(None, description="Line reads: the file goes on after content.")
    past_end: bool = Field(False, description="Line reads: the file has fewer lines than start_line.")


class WriteResult(BaseModel):
    model_config = _FROZEN

    path: str
    path_b64: str | None = None
    sha256: str = Field(description="SHA-256 of the content now in the file.")
    size: int
    created: bool = Field(description="No file was there before.")


class ListError(BaseModel):
    model_config = _FROZEN

    path: str
    errno: str


class ListResult(BaseModel):
    model_config = _FROZEN

    path: str
    path_b64: str | None = None
    entries: list[FileInfo]
    truncated: bool = Field(description="More entries exist than the limit allowed.")
    errors: list[ListError] = Field(default_factory=list, description="Directories that could not be read.")


class MkdirResult(BaseModel):
    model_config = _FROZEN

    path: str
    path_b64: str | None = None
    created: bool = Field(description="This call made the directory (false: it was there, parents mode).")
    mode: str = Field(
        description="The directory's permission bits now, in octal (e.g. '2775'): the mode asked, exactly, "
        "when this call made it (the kernel clears setgid for a group the login user is not in)."
    )


class MoveResult(BaseModel):
    model_config = _FROZEN

    source: str
    destination: str
    cross_filesystem: bool = Field(description="Copied then removed (source and destination differ in fs).")


class DeleteResult(BaseModel):
    model_config = _FROZEN

    path: str
    path_b64: str | None = None
    type: FileKind


class GrepMatch(BaseModel):
    model_config = _FROZEN

    path: str = Field(description="Relative to the searched directory (invalid UTF-8 replaced).")
    line: int = Field(description="1-based line number.")
    text: str = Field(description="The line (at most 1000 bytes; invalid UTF-8 replaced).")
    before: list[str] = Field(default_factory=list, description="Context lines before it.")
    after: list[str] = Field(default_factory=list, description="Context lines after it.")


class GrepSkipped(BaseModel):
    model_config = _FROZEN

    path: str
    reason: str = Field(description="binary | too_large | an errno name (EACCES, ...).")


class GrepResult(BaseModel):
    model_config = _FROZEN

    path: str
    matches: list[GrepMatch]
    skipped: list[GrepSkipped] = Field(description="Files not searched, with the reason.")
    files_searched: int
    truncated: bool = Field(description="The match or byte bound stopped the search.")
    errors: list[ListError] = Field(default_factory=list, description="Directories that could not be read.")
