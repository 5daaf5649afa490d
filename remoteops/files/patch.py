"""Exact-text patches of a remote file: every hunk is checked before anything is written, then one atomic
write whose ``expected_sha256`` is the content the hunks were checked against (a file changed in between is
``FileConflict``, never a lost update)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from remoteops._errors import InvalidRequest
from remoteops.files.errors import FileConflict

__all__ = ["Hunk", "HunkResult", "PatchResult", "apply_hunks"]

MAX_PATCH_BYTES = 16 * 1024 * 1024  # the whole file passes through the gateway


@dataclass(frozen=True)
class Hunk:
    """Replace ``old`` by ``new``; ``old`` must occur exactly ``count`` times (all of them are replaced)."""

    old: bytes
    new: bytes
    count: int = 1


class HunkResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int = Field(description="1-based position of the hunk in the request.")
    replaced: int = Field(description="Occurrences replaced.")
    line: int = Field(description="1-based line of the first occurrence, in the content before this hunk.")
    lines_removed: int
    lines_added: int


class PatchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    path_b64: str | None = None
    previous_sha256: str
    sha256: str = Field(description="SHA-256 of the content now in the file.")
    size: int
    hunks: list[HunkResult]


def _lines(text: bytes) -> int:
    return text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)


def apply_hunks(
    content: bytes, hunks: list[Hunk], *, target: str, path: str
) -> tuple[bytes, list[HunkResult]]:
    """The content after every hunk, in order; ``FileConflict`` (reason ``hunk_mismatch``, ``hunk`` its
    1-based index) for the first hunk whose ``old`` does not occur exactly ``count`` times."""
    if not hunks:
        raise InvalidRequest(field="hunks", reason="at least one hunk")
    results: list[HunkResult] = []
    for index, hunk in enumerate(hunks, 1):
        if not hunk.old:
            raise InvalidRequest(field=f"hunks[{index}].old", reason="empty")
        if hunk.count < 1:
            raise InvalidRequest(field=f"hunks[{index}].count", reason="must be >= 1")
        found = content.count(hunk.old)
        if found != hunk.count:
            raise FileConflict(
                f"hunk {index}: its old text occurs {found} times, not {hunk.count}; nothing was written",
                target=target,
                path=path,
                reason="hunk_mismatch",
                hunk=index,
                occurrences=found,
            )
        first = content.find(hunk.old)
        results.append(
            HunkResult(
                index=index,
                replaced=found,
                line=content.count(b"\n", 0, first) + 1,
                lines_removed=_lines(hunk.old) * found,
                lines_added=_lines(hunk.new) * found,
            )
        )
        content = content.replace(hunk.old, hunk.new)
    return content, results
