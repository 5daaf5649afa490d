"""Transfers against the real sshd: SHA-256 verification, sync (dry run, delete, excludes), local roots,
overwrite policy, the free-space floor and the scp fallback."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remoteops import (
    ChecksumMismatch,
    DestinationExists,
    FreeSpaceFloor,
    LocalPathDenied,
    MissingCapability,
    PathNotFound,
    SyncOptions,
    TransferCapabilityMissing,
    TransferOptions,
    Transfers,
    TransferSettings,
    TransportSettings,
)
from tests.remoteops.conftest import OpsFactory
from tests.remoteops.test_transfer import (
    NONE,
    VERIFY,
    Env,
    make_tree,
    snapshot,
    transfer_env,
    tree_bytes,
)


@pytest.fixture
async def env(
    ops_factory: OpsFactory, settings: TransportSettings, tmp_path: Path, shared_dir: Path
) -> AsyncIterator[Env]:
    async with transfer_env(ops_factory, settings, tmp_path, shared_dir) as made:
        yield made


# -- verification --------------------------------------------------------------------------------------------


def _corrupt_keeping_size_and_mtime(path: Path) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # rsync's quick check now sees "unchanged"


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_corrupted_remote_copy_is_caught_by_verification_and_renamed_aside(env: Env) -> None:
    data = os.urandom(200_000)
    (env.local / "f.bin").write_bytes(data)
    dest = env.remote / "f.bin"
    await env.tr.upload("root", "f.bin", str(dest), TransferOptions(), NONE)
    _corrupt_keeping_size_and_mtime(dest)
    again = TransferOptions(overwrite="replace", verify="sha256")
    with pytest.raises(ChecksumMismatch) as caught:
        await env.tr.upload("root", "f.bin", str(dest), again, NONE)
    assert caught.value.destination_action == "renamed_aside"
    assert not dest.exists()  # no file claims success under the destination's name
    (aside,) = caught.value.aside
    assert aside == f"{dest}.rog-mismatch.{aside.rsplit('.', 1)[1]}"
    assert (env.remote / aside).read_bytes() != data
    fixed = await env.tr.upload("root", "f.bin", str(dest), again, NONE)
    assert fixed.verified == "sha256"
    assert dest.read_bytes() == data


@pytest.mark.sshd
@pytest.mark.anyio
async def test_a_corrupted_local_copy_in_a_tree_is_caught_by_verification(env: Env) -> None:
    content = make_tree(env.remote / "tree")
    await env.tr.download("root", "copy", str(env.remote / "tree"), TransferOptions(), NONE)
    victim = env.local / "copy" / "with space"
    _corrupt_keeping_size_and_mtime(victim)
    with pytest.raises(ChecksumMismatch) as caught:
        await env.tr.download(
            "root",
            "copy",
            str(env.remote / "tree"),
            TransferOptions(overwrite="replace", verify="sha256"),
            NONE,
        )
    assert caught.value.mismatched == ["with space"]
    assert not victim.exists()
    assert len(tree_bytes(env.local / "copy")) == len(content)  # the bad copy kept aside, renamed


# -- sync ----------------------------------------------------------------------------------------------------


@pytest.mark.sshd
@pytest.mark.anyio
async def test_sync_dry_run_lists_changes_and_changes_nothing(env: Env) -> None:
    make_tree(env.local / "src")
    dest = env.remote / "mirror"
    await env.tr.sync("root", "src", str(dest), SyncOptions(direction="up"), NONE)
    (env.local / "src" / "added file").write_bytes(b"new")
    (env.local / "src" / "with space").write_bytes(b"changed content")
    (dest / "extra on target").write_bytes(b"x")
    before = snapshot(dest)
    dry = await env.tr.sync(
        "root", "src", str(dest), SyncOptions(direction="up", dry_run=True, delete=True), NONE
    )
    assert snapshot(dest) == before  # bytes and mtimes untouched
    changed = {c.path for c in dry.changes if c.action != "deleted"}
    assert {"added file", "with space"} <= changed
    assert dry.deleted == ["extra on target"]
    assert (dry.dry_run, dry.bytes_transferred) == (True, 0)


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_sync_delete_lists_what_it_deleted_and_is_off_by_default(env: Env) -> None:
    make_tree(env.remote / "src")
    local = env.local / "mirror"
    await env.tr.sync("root", "mirror", str(env.remote / "src"), SyncOptions(direction="down"), NONE)
    (local / "stale one").write_bytes(b"1")
    (local / "stale dir").mkdir()
    (local / "stale dir" / "f").write_bytes(b"2")
    kept = await env.tr.sync(
        "root", "mirror", str(env.remote / "src"), SyncOptions(direction="down", excludes=("*.tmp",)), NONE
    )
    assert (kept.deleted, kept.deleted_total) == ([], 0)
    assert (local / "stale one").exists()
    gone = await env.tr.sync(
        "root", "mirror", str(env.remote / "src"), SyncOptions(direction="down", delete=True), NONE
    )
    assert sorted(gone.deleted) == ["stale dir/", "stale dir/f", "stale one"]
    assert not (local / "stale one").exists()
    assert not (local / "stale dir").exists()
    assert tree_bytes(local) == tree_bytes(env.remote / "src")


@pytest.mark.sshd
@pytest.mark.anyio
async def test_sync_excludes_keep_matching_files_out(env: Env) -> None:
    (env.local / "src").mkdir()
    for name in ("keep.txt", "skip.log", "sub/skip.log", "sub/keep.txt"):
        (env.local / "src" / name).parent.mkdir(exist_ok=True)
        (env.local / "src" / name).write_bytes(name.encode())
    result = await env.tr.sync(
        "root", "src", str(env.remote / "out"), SyncOptions(direction="up", excludes=("*.log",)), NONE
    )
    assert sorted(tree_bytes(env.remote / "out")) == ["keep.txt", "sub/keep.txt"]
    assert result.files_transferred == 2


# -- policy and preconditions --------------------------------------------------------------------------------


@pytest.mark.sshd
@pytest.mark.anyio
async def test_local_paths_outside_the_roots_are_refused_before_anything_runs(
    env: Env, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not yours")
    (env.local / "escape").symlink_to(outside)
    cases = {
        str(outside / "secret"): "outside_roots",
        "escape/secret": "symlink_escape",
        "../outside/secret": "dotdot",
    }
    for path, reason in cases.items():
        with pytest.raises(LocalPathDenied) as caught:
            await env.tr.upload("root", path, str(env.remote / "x"), TransferOptions(), NONE)
        assert caught.value.reason == reason
        with pytest.raises(LocalPathDenied):
            await env.tr.download("root", path, str(env.remote / "x"), TransferOptions(), NONE)
    assert not (env.remote / "x").exists()


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_overwrite_policy_parents_and_missing_sources(env: Env) -> None:
    (env.local / "a").write_bytes(b"one")
    dest = env.remote / "deep" / "er" / "a"
    with pytest.raises(PathNotFound) as missing_parent:
        await env.tr.upload("root", "a", str(dest), TransferOptions(), NONE)
    assert missing_parent.value.reason == "parent_missing"
    made = await env.tr.upload("root", "a", str(dest), TransferOptions(create_parents=True), NONE)
    assert made.parents_created
    assert dest.read_bytes() == b"one"
    (env.local / "a").write_bytes(b"two")
    with pytest.raises(DestinationExists):
        await env.tr.upload("root", "a", str(dest), TransferOptions(), NONE)
    skipped = await env.tr.upload("root", "a", str(dest), TransferOptions(overwrite="skip"), NONE)
    assert (skipped.bytes_transferred, dest.read_bytes()) == (0, b"one")
    await env.tr.upload("root", "a", str(dest), TransferOptions(overwrite="replace"), NONE)
    assert dest.read_bytes() == b"two"
    with pytest.raises(PathNotFound) as no_source:
        await env.tr.download("root", "b", str(env.remote / "nope"), TransferOptions(), NONE)
    assert (no_source.value.reason, no_source.value.side) == ("not_found", "remote")


def _rewrite_in_the_same_second(path: Path, data: bytes, like: Path) -> None:
    """Give path new bytes of the same size and a mtime in the same second as like's, differing only in ns."""
    assert len(data) == like.stat().st_size
    path.write_bytes(data)
    seconds, ns = divmod(like.stat().st_mtime_ns, 10**9)
    stamp = seconds * 10**9 + (ns + 1) % 10**9
    os.utime(path, ns=(stamp, stamp))
    assert path.stat().st_mtime_ns // 10**9 == like.stat().st_mtime_ns // 10**9
    assert path.stat().st_mtime_ns != like.stat().st_mtime_ns


@pytest.mark.sshd
@pytest.mark.anyio
async def test_replace_sees_a_same_size_rewrite_within_the_same_second(env: Env) -> None:
    # CI regression: "one" → "two" written within one second looked unchanged to rsync's quick check (it
    # compared whole seconds), so overwrite="replace" reported success and left the old bytes in place.
    (env.local / "a").write_bytes(b"one")
    dest = env.remote / "a"
    await env.tr.upload("root", "a", str(dest), TransferOptions(), NONE)
    _rewrite_in_the_same_second(env.local / "a", b"two", like=dest)
    up = await env.tr.upload("root", "a", str(dest), TransferOptions(overwrite="replace"), NONE)
    assert (dest.read_bytes(), up.files_transferred) == (b"two", 1)
    _rewrite_in_the_same_second(dest, b"six", like=env.local / "a")
    down = await env.tr.download("root", "a", str(dest), TransferOptions(overwrite="replace"), NONE)
    assert ((env.local / "a").read_bytes(), down.files_transferred) == (b"six", 1)
    content = make_tree(env.local / "tree")
    await env.tr.upload("root", "tree", str(env.remote / "tree"), TransferOptions(), NONE)
    name = next(iter(content))
    changed = bytes(b ^ 0xFF for b in content[name])
    _rewrite_in_the_same_second(env.local / "tree" / name, changed, like=env.remote / "tree" / name)
    tree = await env.tr.upload(
        "root", "tree", str(env.remote / "tree"), TransferOptions(overwrite="replace"), NONE
    )
    assert (env.remote / "tree" / name).read_bytes() == changed
    assert tree.files_transferred == 1  # the unchanged files were still skipped by the quick check


@pytest.mark.sshd
@pytest.mark.anyio
async def test_a_download_below_the_free_space_floor_is_refused(
    env: Env, settings: TransportSettings
) -> None:
    (env.remote / "f").write_bytes(b"x" * 1000)
    floor = shutil.disk_usage(env.local).total * 2  # can never be met
    tight = Transfers(env.ops, settings, TransferSettings(local_roots=(env.local,), min_free_bytes=floor))
    with pytest.raises(FreeSpaceFloor) as caught:
        await tight.download("root", "f", str(env.remote / "f"), TransferOptions(), NONE)
    assert caught.value.needed_bytes == 1000
    assert not (env.local / "f").exists()


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_without_local_rsync_a_plain_file_goes_by_scp_and_a_tree_is_refused(
    env: Env, settings: TransportSettings
) -> None:
    no_rsync = TransferSettings(local_roots=(env.local,), min_free_bytes=0, rsync_binary="/nonexistent/rsync")
    tr = Transfers(env.ops, settings, no_rsync)
    data = os.urandom(70_000)
    (env.local / "plain.bin").write_bytes(data)
    up = await tr.upload("root", "plain.bin", str(env.remote / "plain.bin"), VERIFY, NONE)
    assert (up.method, up.verified) == ("scp", "sha256")
    down = await tr.download("root", "plain-back.bin", str(env.remote / "plain.bin"), TransferOptions(), NONE)
    assert down.method == "scp"
    assert (env.local / "plain-back.bin").read_bytes() == data
    (env.local / "with space").write_bytes(b"x")
    with pytest.raises(MissingCapability) as awkward:  # scp would expand or split this remote path
        await tr.upload("root", "with space", str(env.remote / "with space"), TransferOptions(), NONE)
    assert awkward.value.capability == "rsync"
    make_tree(env.local / "tree")
    with pytest.raises(TransferCapabilityMissing) as tree:  # a MissingCapability naming its side
        await tr.upload("root", "tree", str(env.remote / "tree"), TransferOptions(), NONE)
    assert (tree.value.capability, tree.value.side) == ("rsync", "local")
