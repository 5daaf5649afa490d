"""Transfers through a gateway of the phase's own over MCP/HTTP (native rsync over the target's master):
a tree with awkward names uploaded and downloaded byte-exact with SHA-256 verified end to end (the tool's
manifest hash recomputed here), a download stopped at its time limit and resumed on evidence (moving only
the rest), a sync dry run that lists and changes nothing, and throughput against raw rsync over the very
same master in the same run.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio

from acceptance._mcp import error_code, error_of, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.procs import processes_mentioning
from acceptance.phases._util import own_gateway_config, shared_dir

__all__ = ["transfers"]

MIB = 1024 * 1024
AWKWARD = ["with space", "new\nline", "ünïcødé ✓ 名前", "-leading-dash", "$(touch rog-pwned)", "glob[1]*?"]
SLACK = 256 * 1024
"""rsync matches whole blocks: a resume may resend up to about one block more than the remainder."""
_RAW_S = 300.0
STOP_AFTER_S = 4.0
"""The throttled download's time limit: its probes and rsync's start (a few hundred ms here, more on a busier
machine) fit well inside, so the copy has started and left a partial file when it is stopped; at the
throttle (1 or 4 MiB/s) it cannot have finished the 8 or 24 MiB file by then."""


def _write_random(path: Path, size: int) -> None:
    with path.open("wb") as fh:
        left = size
        while left:
            block = os.urandom(min(4 * MIB, left))
            fh.write(block)
            left -= len(block)


def _make_tree(root: Path, big_files: int, big_size: int) -> dict[str, bytes]:
    """Awkwardly named small files (top level and in an awkward subdirectory) plus ``big_files`` random
    files of ``big_size``; relative path → bytes."""
    sub = "dir with\nnewline [x]"
    (root / sub).mkdir(parents=True)
    content: dict[str, bytes] = {}
    for index, name in enumerate(AWKWARD):
        for rel in (name, f"{sub}/{name}"):
            content[rel] = os.urandom(300 + 41 * index) + rel.encode()
    for index in range(big_files):
        content[f"blob-{index}.bin"] = os.urandom(big_size)
    for rel, data in content.items():
        (root / rel).write_bytes(data)
    return content


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under root: relative path → (bytes, mtime_ns); partial directories left out."""
    out: dict[str, tuple[bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".rog-partial"]
        for name in filenames:
            path = Path(dirpath, name)
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def _bytes_of(root: Path) -> dict[str, bytes]:
    return {rel: data for rel, (data, _) in _tree(root).items()}


def _manifest_sha(content: dict[str, bytes]) -> str:
    """What the tools report for a verified tree: SHA-256 of its sorted ``<sha256>  <path>`` lines."""
    lines = "".join(f"{hashlib.sha256(content[rel]).hexdigest()}  {rel}\n" for rel in sorted(content))
    return hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()


def _pwned_paths(user: str) -> list[Path]:
    """Where ``$(touch rog-pwned)`` would land if a name were ever run: the gateway's and the login's cwd."""
    return [Path.cwd() / "rog-pwned", Path("/root/rog-pwned"), Path(pwd.getpwnam(user).pw_dir) / "rog-pwned"]


def _clear(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    partial = path.parent / ".rog-partial"
    if partial.exists():
        shutil.rmtree(partial)


def _raw(argv: list[str]) -> float:
    """Run a raw rsync (blocking); its wall time in seconds."""
    os.sync()
    started = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=_RAW_S)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"raw rsync failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return took


def _master_socket(control_dir: Path) -> Path:
    sockets = [p for p in control_dir.iterdir() if p.is_socket()]
    if len(sockets) != 1:
        raise RuntimeError(f"expected the gateway's one master socket in {control_dir}, found {sockets}")
    return sockets[0]


@phase(
    "transfers",
    "transfers: rsync over the master, SHA-256 verified, resumable, vs raw rsync",
    needs=("sshd",),
)
async def transfers(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    local = shared_dir(ctx, "rogal-")  # the gateway's local root (the gateway runs as root here)
    remote = shared_dir(ctx, "rogar-")  # the target user writes here (the target is this machine)
    ctx.created(
        "no rsync, scp or ssh process of a transfer is left (none mentions the phase's directories)",
        lambda: not processes_mentioning(str(local)) and not processes_mentioning(str(remote)),
    )
    config = own_gateway_config(
        env,
        [{"name": "plain", "host": env.sshd.alias("plain")}],
        transfers={"local_roots": [str(local)], "min_free_bytes": 64 * MIB},
    )
    control_dir = Path(config["transport"]["control_dir"])
    gw = await ctx.stack.enter_async_context(env.extra_gateway("transfers", config))
    client = await ctx.stack.enter_async_context(env.client_of(gw))
    call = client.call

    async def copy(tool: str, local_path: Path | str, remote_path: Path | str, **opts: Any) -> dict[str, Any]:
        args = {"target": "plain", "local_path": str(local_path), "remote_path": str(remote_path), **opts}
        return await call(tool, args)

    # -- a tree up and down, SHA-256 verified end to end -------------------------------------------------
    content = _make_tree(local / "src", ctx.n(4, 8), ctx.n(256 * 1024, MIB))
    pwned = _pwned_paths(env.sshd.users["plain"])
    pwned_before = [path.exists() for path in pwned]
    total = sum(len(v) for v in content.values())
    up = structured(await copy("remote_upload", local / "src", remote / "tree", verify="sha256"))
    ctx.check(
        (up["kind"], up["method"], up["verified"], up["resumed"]) == ("tree", "rsync", "sha256", False),
        f"tree upload: {up}",
    )
    ctx.check(
        (up["files_verified"], up["bytes_transferred"], up["bytes_total"]) == (len(content), total, total),
        f"tree upload counts: {up}",
    )
    ctx.check(up["sha256"] == _manifest_sha(content), "the upload's manifest SHA-256 is not the tree's")
    ctx.check(_bytes_of(remote / "tree") == content, "the uploaded tree differs on the target")
    down = structured(await copy("remote_download", local / "back", remote / "tree", verify="sha256"))
    ctx.check(down["sha256"] == up["sha256"] and down["files_verified"] == len(content), f"download: {down}")
    ctx.check(_bytes_of(local / "back") == content, "the downloaded tree differs")
    ctx.check([p.exists() for p in pwned] == pwned_before, "an awkward name was run as a command")
    again = await copy("remote_upload", local / "src", remote / "tree")
    ctx.check(error_code(again) == "conflict", f"an existing destination with overwrite=fail: {again}")

    # -- a download stopped at its time limit, then resumed on evidence ----------------------------------
    size = ctx.n(8, 24) * MIB
    _write_random(remote / "big.bin", size)
    (remote / "big.bin").chmod(0o644)
    stopped = await copy(
        "remote_download",
        local / "big.bin",
        remote / "big.bin",
        bwlimit_kib_s=ctx.n(1024, 4096),
        timeout_s=STOP_AFTER_S,
    )
    err = error_of(stopped) or {}
    left = (err.get("details") or {}).get("left_at_destination") or {}
    ctx.check(
        error_code(stopped) == "timeout" and left.get("resumable") is True, f"stopped download: {stopped}"
    )
    kept = int(left.get("partial_bytes") or 0)
    ctx.check(0 < kept < size, f"partial bytes kept: {kept} of {size}")
    ctx.check(not (local / "big.bin").exists(), "an interrupted download left a file claiming to be complete")
    resumed = structured(
        await copy("remote_download", local / "big.bin", remote / "big.bin", verify="sha256")
    )
    ctx.check(
        (resumed["resumed"], resumed["partial_bytes_found"]) == (True, kept), f"resumed download: {resumed}"
    )
    ctx.check(resumed["bytes_transferred"] <= size - kept + SLACK, f"the resume resent too much: {resumed}")
    ctx.check((local / "big.bin").read_bytes() == (remote / "big.bin").read_bytes(), "resumed copy differs")
    fresh = structured(await copy("remote_download", local / "fresh.bin", remote / "big.bin"))
    ctx.check(
        (fresh["resumed"], fresh["bytes_skipped"], fresh["bytes_transferred"]) == (False, 0, size),
        f"a fresh download claims a resume: {fresh}",
    )

    # -- sync: a dry run lists what would change and changes nothing --------------------------------------
    (local / "src" / "blob-0.bin").write_bytes(os.urandom(1000))
    (local / "src" / "new file").write_bytes(b"new")
    (remote / "tree" / "extra on target").write_bytes(b"extra")
    before = _tree(remote / "tree")
    dry = structured(
        await call(
            "remote_sync",
            {
                "target": "plain",
                "local_path": str(local / "src"),
                "remote_path": str(remote / "tree"),
                "direction": "up",
                "dry_run": True,
                "delete": True,
            },
        )
    )
    listed = {c["path"] for c in dry["changes"] if c["action"] != "deleted"}
    ctx.check({"blob-0.bin", "new file"} <= listed, f"the dry run did not list the changes: {dry['changes']}")
    ctx.check(dry["deleted"] == ["extra on target"], f"the dry run's deletions: {dry['deleted']}")
    ctx.check(_tree(remote / "tree") == before, "the dry run changed the target")
    synced = structured(
        await call(
            "remote_sync",
            {
                "target": "plain",
                "local_path": str(local / "src"),
                "remote_path": str(remote / "tree"),
                "direction": "up",
            },
        )
    )
    after = _bytes_of(remote / "tree")
    ctx.check(
        after["new file"] == b"new" and after["blob-0.bin"] == (local / "src" / "blob-0.bin").read_bytes(),
        "sync",
    )
    ctx.check("extra on target" in after and synced["deleted_total"] == 0, "sync deleted without delete=true")

    # -- throughput against raw rsync over the gateway's own master, interleaved ---------------------------
    bench = ctx.n(8, 64) * MIB
    _write_random(local / "payload.bin", bench)
    _write_random(remote / "payload.bin", bench)
    (remote / "payload.bin").chmod(0o644)
    sock = _master_socket(control_dir)
    host = env.sshd.alias("plain")
    rsh = f"ssh -F {env.sshd.ssh_config} -S {sock} -o ControlMaster=no"
    times: dict[str, list[float]] = {}
    for round_ in range(ctx.n(1, 3)):
        for direction in ("upload", "download"):
            dst = remote / "up.bin" if direction == "upload" else local / "down.bin"
            src_arg = (
                str(local / "payload.bin") if direction == "upload" else f"{host}:{remote / 'payload.bin'}"
            )
            dst_arg = f"{host}:{dst}" if direction == "upload" else str(dst)
            order = ("raw", "gateway") if round_ % 2 == 0 else ("gateway", "raw")
            for who in order:
                _clear(dst)
                if who == "raw":
                    took = await anyio.to_thread.run_sync(_raw, ["rsync", "-t", "-e", rsh, src_arg, dst_arg])
                else:
                    await anyio.to_thread.run_sync(os.sync)
                    started = time.perf_counter()
                    local_arg = local / "payload.bin" if direction == "upload" else dst
                    remote_arg = dst if direction == "upload" else remote / "payload.bin"
                    moved = structured(
                        await copy(f"remote_{direction}", local_arg, remote_arg, method="rsync")
                    )
                    took = time.perf_counter() - started
                    ctx.check(moved["bytes_transferred"] == bench, f"gateway {direction}: {moved}")
                ctx.check(dst.stat().st_size == bench, f"{who} {direction} left {dst.stat().st_size} bytes")
                times.setdefault(f"{who}_{direction}", []).append(took)
    figures: dict[str, Any] = {
        "tree_files": len(content),
        "tree_bytes": total,
        "tree_upload_mib_s": round(up["throughput_bytes_s"] / MIB, 1),
        "tree_download_mib_s": round(down["throughput_bytes_s"] / MIB, 1),
        "resume_file_bytes": size,
        "resume_partial_bytes_found": kept,
        "resume_bytes_transferred": resumed["bytes_transferred"],
        "sync_dry_run_changes": dry["changes_total"],
        "bench_bytes": bench,
        "bench_rounds": ctx.n(1, 3),
    }
    for direction in ("upload", "download"):
        raw_s, gw_s = (
            statistics.median(times[f"raw_{direction}"]),
            statistics.median(times[f"gateway_{direction}"]),
        )
        figures[f"raw_rsync_{direction}_mib_s"] = round(bench / MIB / raw_s, 1)
        figures[f"gateway_{direction}_mib_s"] = round(bench / MIB / gw_s, 1)
        figures[f"{direction}_ratio_raw_time_over_gateway_time"] = round(raw_s / gw_s, 2)
    ctx.figures.update(figures)
