"""Structured remote files through the gateway over MCP/HTTP: exact bytes and names, SHA-256 preconditions,
patches that fail whole, permission errors, bounded listings and searches."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from acceptance._mcp import carried, error_code, error_of, structured
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import ms_figures, timed

__all__ = ["files"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _workdir() -> Path:
    """A directory the plain target user may write (the target is this machine)."""
    work = Path(tempfile.mkdtemp(prefix="rogaf-", dir="/tmp"))
    work.chmod(0o777)
    return work


def _bytes(path: Path | bytes) -> bytes:
    return Path(os.fsdecode(path)).read_bytes()


@phase("files", "remote files: stat, read, write, patch, list, find, grep with SHA-256", needs=("sshd",))
async def files(ctx: PhaseContext) -> None:
    call = ctx.env.main.call
    work = _workdir()
    ctx.created(f"the phase's directory {work} is removed", lambda: not work.exists())
    try:
        text = "server {\n    listen 80;\n}\n# ünïcödé ☃\n"
        wrote = structured(
            await call("remote_write", {"target": "plain", "path": f"{work}/a.conf", "content": text})
        )
        ctx.check(wrote["sha256"] == _sha(text.encode()), f"write sha256: {wrote}")
        read_result = await call("remote_read", {"target": "plain", "path": f"{work}/a.conf"})
        read = structured(read_result)
        ctx.check((carried(read_result), read["sha256"]) == (text, wrote["sha256"]), f"read back: {read}")
        ctx.check("content" not in read, f"the content travels once, in the text: {read}")

        odd = os.fsencode(work) + b"/na me $(x) `y` \xff\n-z"
        blob = bytes(range(256)) * 64
        args = {"target": "plain", "path_b64": base64.b64encode(odd).decode()}
        structured(
            await call(
                "remote_write", {**args, "content": base64.b64encode(blob).decode(), "encoding": "base64"}
            )
        )
        stat = structured(await call("remote_stat", {**args, "sha256": True}))
        ctx.check((stat["size"], stat["sha256"]) == (len(blob), _sha(blob)), f"odd name stat: {stat}")
        ctx.check(_bytes(odd) == blob, "the odd-named file holds the exact bytes")

        stale = await call(
            "remote_write",
            {"target": "plain", "path": f"{work}/a.conf", "content": "x", "expected_sha256": "0" * 64},
        )
        ctx.check(error_code(stale) == "conflict", f"stale expected_sha256: {stale}")
        hunks = [
            {"old": "listen 80", "new": "listen 8080"},
            {"old": "server", "new": "srv"},
            {"old": "nope", "new": "x"},
        ]
        failed = await call("remote_patch", {"target": "plain", "path": f"{work}/a.conf", "hunks": hunks})
        details = (error_of(failed) or {}).get("details", {})
        ctx.check(
            (error_code(failed), details.get("hunk")) == ("conflict", 3), f"third hunk failing: {failed}"
        )
        ctx.check(_bytes(work / "a.conf") == text.encode(), "a failed patch leaves the file byte-identical")
        patched = structured(
            await call("remote_patch", {"target": "plain", "path": f"{work}/a.conf", "hunks": hunks[:2]})
        )
        want = text.replace("listen 80", "listen 8080").replace("server", "srv")
        ctx.check(_bytes(work / "a.conf") == want.encode(), f"patch applied: {patched}")

        secret = work / "root-only"
        secret.write_bytes(b"root")
        secret.chmod(0o600)
        denied = await call("remote_read", {"target": "plain", "path": str(secret)})
        ctx.check(error_code(denied) == "privilege_error", f"root-owned 0600 read: {denied}")

        listing = structured(await call("remote_list", {"target": "plain", "path": str(work), "limit": 2}))
        ctx.check(listing["truncated"] is True and len(listing["entries"]) == 2, f"bounded list: {listing}")
        grep = structured(
            await call("remote_grep", {"target": "plain", "path": str(work), "pattern": "listen"})
        )
        ctx.check([m["text"].strip() for m in grep["matches"]] == ["listen 8080;"], f"grep: {grep}")

        samples = []
        for _ in range(ctx.n(20, 100)):
            result, ms = await timed(call("remote_stat", {"target": "plain", "path": f"{work}/a.conf"}))
            ctx.check(error_code(result) is None, f"stat failed: {result}")
            samples.append(ms)
        payload = base64.b64encode(os.urandom(30_000)).decode()  # 40 000 characters, under the argument cap
        write_ms = [
            (
                await timed(
                    call("remote_write", {"target": "plain", "path": f"{work}/big", "content": payload})
                )
            )[1]
            for _ in range(ctx.n(5, 20))
        ]
        read_ms = [
            (await timed(call("remote_read", {"target": "plain", "path": f"{work}/big"})))[1]
            for _ in range(ctx.n(5, 20))
        ]
        ctx.figures.update(
            {
                **ms_figures("stat", samples),
                **ms_figures("write_40k", write_ms),
                **ms_figures("read_40k", read_ms),
            }
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
