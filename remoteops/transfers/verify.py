"""SHA-256 verification of a finished transfer, and what happens to copies that do not match.

Both ends are hashed streamed (local: a worker thread, 1 MiB blocks; remote: ``sha256sum``). A mismatched
copy at the destination is renamed aside to ``<name>.rog-mismatch.<nonce>`` (kept for inspection, never
under its own name) and the call fails with :class:`ChecksumMismatch` naming both.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from remoteops.transfers.errors import ChecksumMismatch, TransferFailed
from remoteops.transfers.probe import hash_local, hash_remote

if TYPE_CHECKING:
    from remoteops._runner import Runner

__all__ = ["Verified", "verify_transfer"]

_ASIDE = 'n=$1; shift; for f do mv -f -- "$f" "$f.rog-mismatch.$n" || exit 1; done'
_MAX_LISTED = 50


class Verified:
    def __init__(self, files: int, digest: str | None) -> None:
        self.files = files
        self.digest = digest


async def verify_transfer(
    ops: Runner,
    target: str,
    *,
    local: Path,
    remote: str,
    names: dict[str, int] | None,
    destination: str,
    ceiling_s: float,
    file_size: int = 0,
) -> Verified:
    """Compare SHA-256 of ``local`` and ``remote`` (a file when ``names`` is None, else those files of the
    tree); ``destination`` ("local"/"remote") is where mismatched copies are renamed aside."""
    local_h = await hash_local(local, None if names is None else sorted(names))
    remote_h = await hash_remote(ops, target, remote, names, ceiling_s=ceiling_s, file_size=file_size)
    compared = [n for n in local_h if n in remote_h]
    missing = [n for n in local_h if n not in remote_h]
    if destination == "remote" and missing:
        compared += missing  # every source file must be at the destination
    mismatched = sorted(n for n in compared if remote_h.get(n) != local_h[n])
    if not mismatched:
        if names is None:
            return Verified(1, local_h[""])
        manifest = "".join(f"{local_h[n]}  {n}\n" for n in sorted(compared))
        return Verified(
            len(compared), hashlib.sha256(manifest.encode("utf-8", "surrogateescape")).hexdigest()
        )
    nonce = secrets.token_hex(4)
    present = [n for n in mismatched if destination == "local" or n in remote_h]
    if destination == "local":
        aside = _aside_local(local, present, nonce)
    else:
        aside = await _aside_remote(ops, target, remote, present, nonce)
    shown = mismatched[:_MAX_LISTED]
    raise ChecksumMismatch(
        f"SHA-256 differs for {len(mismatched)} file(s): {', '.join(n or '(the file)' for n in shown)}; "
        "the bad copies were renamed aside",
        target=target,
        mismatched=shown,
        destination_action="renamed_aside",
        aside=aside[:_MAX_LISTED],
    )


def _join(base: str, name: str) -> str:
    return base if not name else f"{base.rstrip('/')}/{name}"


def _aside_local(root: Path, names: list[str], nonce: str) -> list[str]:
    moved = []
    for name in names:
        path = root / name if name else root
        dest = path.with_name(f"{path.name}.rog-mismatch.{nonce}")
        os.replace(path, dest)
        moved.append(str(dest))
    return moved


async def _aside_remote(ops: Runner, target: str, remote: str, names: list[str], nonce: str) -> list[str]:
    paths = [_join(remote, name) for name in names]
    for start in range(0, len(paths), 200):
        chunk = paths[start : start + 200]
        result = await ops.run(target, ["sh", "-c", _ASIDE, "rog-aside", nonce, *chunk])
        if result.exit_code != 0:
            raise TransferFailed(
                f"could not rename mismatched copies aside: {result.stderr[-300:]}",
                target=target,
                stage="verify",
                exit_code=result.exit_code,
            )
    return [f"{p}.rog-mismatch.{nonce}" for p in paths]
