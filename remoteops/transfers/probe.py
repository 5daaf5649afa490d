"""What is where before and after a transfer: kinds, sizes, partial-file evidence and SHA-256 of both ends.

Remote questions go through :meth:`RemoteOps.run` as argv; paths are argv elements of fixed scripts (never
part of a shell string). Local questions run in a worker thread (``anyio.to_thread``); files are hashed in
1 MiB blocks, never read whole.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

import anyio

from remoteops._errors import ProbeError
from remoteops.transfers.models import PARTIAL_DIR

if TYPE_CHECKING:
    from remoteops._runner import Runner

__all__ = [
    "Kind",
    "LocalTree",
    "Probe",
    "hash_local",
    "hash_remote",
    "local_probe",
    "remote_name",
    "remote_probe",
    "split_remote",
]

Kind = Literal["file", "dir", "other", "none"]
_BLOCK = 1024 * 1024
_BATCH_OUTPUT = 30_000  # expected sha256sum output per remote batch, well under the exec output cap
_HASH_RATE = 50 * 1024 * 1024  # bytes/s assumed when sizing a hash time limit

_PROBE = r"""p=$1 par=$2 name=$3
kind() { if [ -d "$1" ]; then echo dir; elif [ -f "$1" ]; then echo file;
  elif [ -e "$1" ] || [ -L "$1" ]; then echo other; else echo none; fi; }
k=$(kind "$p"); echo "kind=$k"; echo "parent=$(kind "$par")"
if [ "$k" = file ]; then echo "size=$(wc -c < "$p")"; fi
if [ "$k" = dir ]; then
  find "$p/" -type f ! -path "*/$4/*" -printf '%s\n' 2>/dev/null |
    awk '{n++; s+=$1} END {printf "files=%.0f\nsize=%.0f\n", n, s}'
  find "$p/" -type f -path "*/$4/*" -printf '%s\n' 2>/dev/null |
    awk '{n++; s+=$1} END {printf "partials=%.0f\npartial=%.0f\n", n, s}'
fi
q="$par/$4/$name"
if [ "$k" != dir ] && [ -f "$q" ]; then echo "partials=1"; echo "partial=$(wc -c < "$q")"; fi
"""
_HASH_TREE = 'cd -- "$1" && exec xargs -0 -r sha256sum -z --'


@dataclass(frozen=True)
class Probe:
    """One side of a transfer as found: the path's kind and size, its parent's kind, partial evidence."""

    kind: Kind
    parent: Kind
    size: int = 0
    files: int = 0
    partial_files: int = 0
    partial_bytes: int = 0


@dataclass(frozen=True)
class LocalTree:
    files: dict[str, int]  # relative POSIX path -> size (regular files, partial dirs left out)


def _kind(path: Path) -> Kind:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "other" if path.is_symlink() else "none"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def remote_name(path: str) -> str:
    return PurePosixPath(path).name


def split_remote(path: str) -> tuple[str, str]:
    pure = PurePosixPath(path)
    return str(pure.parent) or ".", pure.name


def _walk(root: Path) -> dict[str, int]:
    files: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != PARTIAL_DIR]
        for name in filenames:
            full = Path(dirpath, name)
            st = full.lstat()
            if stat.S_ISREG(st.st_mode):
                files[full.relative_to(root).as_posix()] = st.st_size
    return files


def _local_probe(path: Path) -> tuple[Probe, LocalTree | None]:
    kind = _kind(path)
    parent = _kind(path.parent)
    partial = path.parent / PARTIAL_DIR / path.name
    if kind == "file":
        p_size = partial.stat().st_size if partial.is_file() else None
        probe = Probe(kind, parent, path.stat().st_size, 1, 1 if p_size is not None else 0, p_size or 0)
        return probe, None
    if kind == "dir":
        tree = _walk(path)
        partials = [p for p in path.rglob(f"{PARTIAL_DIR}/*") if p.is_file() and not p.is_symlink()]
        probe = Probe(
            kind,
            parent,
            sum(tree.values()),
            len(tree),
            len(partials),
            sum(p.stat().st_size for p in partials),
        )
        return probe, LocalTree(tree)
    p_size = partial.stat().st_size if partial.is_file() else None
    return Probe(kind, parent, 0, 0, 1 if p_size is not None else 0, p_size or 0), None


async def local_probe(path: Path) -> tuple[Probe, LocalTree | None]:
    return await anyio.to_thread.run_sync(_local_probe, path, abandon_on_cancel=True)


async def remote_probe(ops: Runner, target: str, path: str, partial_name: str | None = None) -> Probe:
    """``partial_name``: the file name rsync writes (and keeps partial data of), when not the path's own."""
    parent, name = split_remote(path)
    name = partial_name or name
    result = await ops.run(target, ["sh", "-c", _PROBE, "rog-probe", path, parent, name, PARTIAL_DIR])
    if result.exit_code != 0:
        raise ProbeError(f"path probe exited {result.exit_code}: {result.stderr[-300:]}", target=target)
    values: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    kinds = ("file", "dir", "other", "none")
    kind, parent_kind = values.get("kind"), values.get("parent")
    if kind not in kinds or parent_kind not in kinds:
        raise ProbeError(f"unparseable path probe output {result.stdout[:200]!r}", target=target)

    def number(key: str) -> int:
        raw = values.get(key, "0") or "0"
        return int(raw) if raw.isdigit() else 0

    return Probe(
        kind,  # type: ignore[arg-type]
        parent_kind,  # type: ignore[arg-type]
        number("size"),
        number("files") if kind == "dir" else (1 if kind == "file" else 0),
        number("partials"),
        number("partial"),
    )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


async def hash_local(root: Path, names: list[str] | None) -> dict[str, str]:
    """SHA-256 of ``root`` (a file: key ``""``) or of ``names`` under it, streamed in a worker thread."""

    def run() -> dict[str, str]:
        if names is None:
            return {"": _sha256_file(root)}
        return {name: _sha256_file(root / name) for name in names}

    return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)  # a cancel never waits on a disk


def _limit_s(ceiling_s: float, size: int) -> float:
    return min(ceiling_s, max(60.0, size / _HASH_RATE))


async def hash_remote(
    ops: Runner,
    target: str,
    path: str,
    names: dict[str, int] | None,
    *,
    ceiling_s: float,
    file_size: int = 0,
) -> dict[str, str]:
    """SHA-256 on the target with ``sha256sum`` (a file: key ``""``; a tree: ``names`` relative to ``path``,
    sent NUL-separated on stdin in batches whose output fits the exec output cap). Missing files are absent
    from the answer."""
    if names is None:
        result = await ops.run(
            target, ["sha256sum", "-z", "--", path], timeout_s=_limit_s(ceiling_s, file_size)
        )
        digest = result.stdout[:64]
        if result.exit_code != 0 or len(digest) != 64:
            raise ProbeError(f"sha256sum exited {result.exit_code}: {result.stderr[-300:]}", target=target)
        return {"": digest}
    out: dict[str, str] = {}
    batch: list[str] = []
    size = expected = 0
    items = sorted(names.items())
    for index, (name, file_size) in enumerate(items):
        batch.append(name)
        size += file_size
        expected += 67 + len(name.encode("utf-8", "surrogateescape"))
        if expected < _BATCH_OUTPUT and index + 1 < len(items):
            continue
        stdin = b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in batch)
        argv = ["sh", "-c", _HASH_TREE, "rog-hash", path]
        result = await ops.run(target, argv, stdin=stdin, timeout_s=_limit_s(ceiling_s, size))
        if result.stdout_truncated:
            raise ProbeError("sha256sum output was truncated", target=target)
        for record in result.stdout.split("\0"):
            if len(record) > 66 and record[64:66] in ("  ", " *"):
                out[record[66:]] = record[:64]
        batch, size, expected = [], 0, 0
    return out
