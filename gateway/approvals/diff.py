"""The change a write or a patch would make, as a unified diff for the approval page.

``remote_write``: the file's current text is read from the target (bounded in size and time, as the
caller; a missing, binary or unreadable file is said so) and diffed against the new content.
``remote_patch``: each hunk as ``-old`` / ``+new`` lines (the patch tool replaces exact text). Anything
else has no diff (the page shows the arguments). The diff is display only: what is hashed and re-checked
is the request itself (``gateway.approvals.rules``).
"""

from __future__ import annotations

import base64
import binascii
import difflib
from collections.abc import Mapping
from typing import Any

import anyio

from remoteops import FileNotFound, RemoteOps, RemoteOpsError

__all__ = ["MAX_DIFF_CHARS", "change_diff"]

MAX_DIFF_CHARS = 20_000
_READ_BYTES = 256 * 1024
_READ_S = 10.0


def _clip(text: str) -> str:
    return text if len(text) <= MAX_DIFF_CHARS else text[:MAX_DIFF_CHARS] + "\n… (diff cut for display)\n"


def _new_text(arguments: Mapping[str, Any]) -> str | None:
    content = arguments.get("content")
    if not isinstance(content, str):
        return None
    if arguments.get("encoding") == "base64":
        try:
            return base64.b64decode(content, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
    return content


async def _current(remote: RemoteOps, target: str, path: str) -> tuple[str | None, str]:
    """The file's current text (None: none to diff against) and a note on why not."""
    try:
        with anyio.fail_after(_READ_S):
            found = await remote.files.read(target, path, max_bytes=_READ_BYTES)
    except TimeoutError:
        return None, "(the current file could not be read in time: showing the new content)"
    except FileNotFound:
        return "", "(a new file)"
    except RemoteOpsError as exc:
        return None, f"(the current file could not be read: {type(exc).__name__})"
    if found.truncated:
        return None, "(the current file is too large to diff: showing the new content)"
    try:
        return found.content.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "(the current file is not text: showing the new content)"


async def change_diff(remote: RemoteOps, tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The unified diff of a ``remote_write`` or ``remote_patch`` call, or None."""
    target, path = arguments.get("target"), arguments.get("path")
    if tool == "remote_patch":
        lines = []
        for index, hunk in enumerate(arguments.get("hunks") or [], 1):
            if isinstance(hunk, Mapping):
                lines.append(f"@@ hunk {index} (x{hunk.get('count', 1)}) @@")
                lines.extend("-" + line for line in str(hunk.get("old", "")).splitlines())
                lines.extend("+" + line for line in str(hunk.get("new", "")).splitlines())
        return _clip("\n".join(lines)) if lines else None
    if tool != "remote_write" or not isinstance(target, str) or not isinstance(path, str):
        return None
    new = _new_text(arguments)
    if new is None:
        return "(binary content: see the arguments)"
    old, note = await _current(remote, target, path)
    if old is None:
        return _clip(f"{note}\n" + "".join("+" + line for line in new.splitlines(keepends=True)))
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"{path} (now)", f"{path} (after)"
    )
    text = "".join(diff) or "(no change: the content is the same)"
    return _clip(f"{note}\n{text}" if note else text)
