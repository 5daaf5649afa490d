"""remote_upload / remote_download / remote_sync through a real MCP client against the real sshd: offered only
with local roots (health says why not), schemas, error codes, progress notifications, time limits that
leave no process behind, audit facts, and the demo's zero-setup local root."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from structlog.testing import capture_logs

from gateway._demo import demo_settings
from gateway._dispatch import error_payload
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory
from tests.remoteops.test_transfer import group_members, make_tree, pids_with_arg, running, snapshot

TOOLS = {"remote_upload", "remote_download", "remote_sync"}


@pytest.fixture
def remote_dir() -> Iterator[Path]:
    """A short directory the target's users can write to (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogtt-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _config(sshd: SshdInstance, local_root: Path | None, **transfers: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [
            {"name": "root", "host": sshd.alias("root")},
            {"name": "nopy", "host": sshd.alias("nopy")},
        ],
    }
    if local_root is not None:
        cfg["transfers"] = {"local_roots": [str(local_root)], "min_free_bytes": 0, **transfers}
    return cfg


@pytest.fixture
def nopy_without_rsync(sshd: SshdInstance) -> Iterator[None]:
    """For the length of one test, the ro-nopy user's PATH (sshd's ``SetEnv PATH=<workdir>/nopy-bin``, a
    directory of links to /usr/bin) holds no rsync: a real target whose login cannot find the program."""
    link = sshd.workdir / "nopy-bin" / "rsync"
    points_to = link.readlink()
    link.unlink()
    try:
        yield
    finally:
        link.symlink_to(points_to)


def _err(result: Any) -> dict[str, Any]:
    assert result.is_error is True, result
    assert result.structured_content is None  # failures carry no structuredContent (TypeScript clients)
    payload = error_payload(result)
    assert payload is not None
    return dict(payload)


def _ok(result: Any) -> dict[str, Any]:
    assert result.is_error is not True, result.content
    return dict(result.structured_content)


@pytest.mark.sshd
@pytest.mark.anyio
async def test_transfer_tools_are_not_offered_without_local_roots_and_health_says_why(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_config(sshd, None)) as (client, _):
        names = {t.name for t in (await client.list_tools()).tools}
        assert not names & TOOLS
        health = _ok(await client.call_tool("gateway_health", {}))
        assert set(health["filtered_out"]) >= TOOLS
        assert set(health["unavailable"]) == TOOLS | {"upload_many"}  # the fleet upload needs them too
        assert all("local_roots" in reason for reason in health["unavailable"].values())
        refused = await client.call_tool(
            "remote_upload", {"target": "root", "local_path": "a", "remote_path": "b"}
        )
        error = error_payload(refused)
        assert error is not None
        assert error["code"] == "policy_denied"  # not served, and saying why: no local_roots configured
        assert "local_roots" in error["details"]["reason"]


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_upload_download_and_sync_through_mcp_match_their_schemas_and_audit_paths_sizes_hashes(
    gateway_client: ClientFactory, sshd: SshdInstance, tmp_path: Path, remote_dir: Path
) -> None:
    root = tmp_path / "root"
    content = make_tree(root / "tree")
    secret_bytes = b"Planted-File-Content-0xfeed"
    (root / "tree" / "payload").write_bytes(secret_bytes)
    async with gateway_client(**_config(sshd, root)) as (client, rt):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= TOOLS
        args = {
            "target": "root",
            "local_path": "tree",
            "remote_path": str(remote_dir / "t"),
            "verify": "sha256",
        }
        up = _ok(await client.call_tool("remote_upload", args))
        jsonschema.validate(up, tools["remote_upload"].output_schema)
        assert (up["files_total"], up["method"], up["verified"]) == (len(content) + 1, "rsync", "sha256")
        down = _ok(await client.call_tool("remote_download", {**args, "local_path": "back"}))
        jsonschema.validate(down, tools["remote_download"].output_schema)
        assert down["sha256"] == up["sha256"]
        assert snapshot(root / "back").keys() == snapshot(root / "tree").keys()
        sync_args = {"target": "root", "local_path": "tree", "remote_path": str(remote_dir / "t")}
        (remote_dir / "t" / "extra").write_bytes(b"x")
        dry = _ok(
            await client.call_tool(
                "remote_sync", {**sync_args, "direction": "up", "dry_run": True, "delete": True}
            )
        )
        jsonschema.validate(dry, tools["remote_sync"].output_schema)
        assert dry["deleted"] == ["extra"]
        assert (remote_dir / "t" / "extra").exists()
    records = [json.loads(line) for line in rt.settings.audit_path.read_text().splitlines()]
    uploads = [r for r in records if r.get("tool") == "remote_upload"]
    assert uploads[0]["facts"]["sha256"] == up["sha256"]
    assert uploads[0]["facts"]["bytes_total"] == up["bytes_total"]
    assert uploads[0]["facts"]["remote_path"] == str(remote_dir / "t")
    assert secret_bytes.decode() not in rt.settings.audit_path.read_text()  # file data is never logged


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_local_paths_outside_the_roots_and_bad_checksums_fail_with_their_codes(
    gateway_client: ClientFactory, sshd: SshdInstance, tmp_path: Path, remote_dir: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside").write_bytes(b"secret")
    (root / "link").symlink_to(tmp_path / "outside")
    async with gateway_client(**_config(sshd, root)) as (client, _):
        for path, reason in ((str(tmp_path / "outside"), "outside_roots"), ("link", "symlink_escape")):
            args = {"target": "root", "local_path": path, "remote_path": str(remote_dir / "x")}
            error = _err(await client.call_tool("remote_upload", args))
            assert (error["code"], error["details"]["reason"]) == ("policy_denied", reason)
        (root / "f").write_bytes(os.urandom(5000))
        args = {"target": "root", "local_path": "f", "remote_path": str(remote_dir / "f")}
        _ok(await client.call_tool("remote_upload", args))
        st = (remote_dir / "f").stat()
        (remote_dir / "f").write_bytes(os.urandom(5000))  # same size, same mtime: rsync sees no change
        os.utime(remote_dir / "f", ns=(st.st_atime_ns, st.st_mtime_ns))
        error = _err(
            await client.call_tool("remote_upload", {**args, "overwrite": "replace", "verify": "sha256"})
        )
        assert error["code"] == "checksum_mismatch"
        assert error["details"]["destination_action"] == "renamed_aside"
        assert not (remote_dir / "f").exists()
        error = _err(
            await client.call_tool("remote_download", {**args, "remote_path": str(remote_dir / "no")})
        )
        assert (error["code"], error["details"]["side"]) == ("not_found", "remote")
        error = _err(await client.call_tool("remote_download", {**args, "remote_path": str(remote_dir)}))
        assert error["code"] == "conflict"  # the local 'f' exists and overwrite is "fail"


@pytest.mark.sshd
@pytest.mark.anyio
async def test_rsync_missing_on_the_target_is_missing_remote_capability_on_the_remote_side(
    gateway_client: ClientFactory,
    sshd: SshdInstance,
    tmp_path: Path,
    remote_dir: Path,
    nopy_without_rsync: None,
) -> None:
    root = tmp_path / "root"
    make_tree(root / "tree")
    (root / "f").write_bytes(os.urandom(3000))
    async with gateway_client(**_config(sshd, root)) as (client, _):
        with anyio.fail_after(60):
            caps = _ok(await client.call_tool("target_capabilities", {"target": "nopy"}))
            tree = _err(
                await client.call_tool(
                    "remote_upload",
                    {"target": "nopy", "local_path": "tree", "remote_path": str(remote_dir / "t")},
                )
            )
            forced = _err(
                await client.call_tool(
                    "remote_upload",
                    {
                        "target": "nopy",
                        "local_path": "f",
                        "remote_path": str(remote_dir / "f"),
                        "method": "rsync",
                    },
                )
            )
            synced = _err(
                await client.call_tool(
                    "remote_sync",
                    {
                        "target": "nopy",
                        "local_path": "tree",
                        "remote_path": str(remote_dir / "t"),
                        "direction": "up",
                    },
                )
            )
            # a single file may go by scp when the request allows it (the default method)
            plain = _ok(
                await client.call_tool(
                    "remote_upload",
                    {"target": "nopy", "local_path": "f", "remote_path": str(remote_dir / "f")},
                )
            )
    assert caps["tools"]["rsync"] is False
    for error in (tree, forced, synced):
        assert error["code"] == "missing_remote_capability"
        assert (error["details"]["capability"], error["details"]["side"]) == ("rsync", "remote")
    assert not (remote_dir / "t").exists()
    assert plain["method"] == "scp"
    assert (remote_dir / "f").read_bytes() == (root / "f").read_bytes()


SIZE = 12 * 1024 * 1024


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_progress_notifications_reach_a_real_mcp_client_at_most_once_per_interval(
    gateway_client: ClientFactory, sshd: SshdInstance, tmp_path: Path, remote_dir: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "big").write_bytes(os.urandom(SIZE))
    seen: list[tuple[float, float | None, str | None]] = []
    times: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        times.append(anyio.current_time())
        seen.append((progress, total, message))

    interval = 0.5
    async with gateway_client(**_config(sshd, root, progress_interval_s=interval)) as (client, rt):
        assert rt.settings.transfers.progress_interval_s == interval
        args = {
            "target": "root",
            "local_path": "big",
            "remote_path": str(remote_dir / "big"),
            "bwlimit_kib_s": 4096,
        }
        with anyio.fail_after(60):
            started = anyio.current_time()
            _ok(await client.call_tool("remote_upload", args, progress_callback=on_progress))
            elapsed = anyio.current_time() - started
    assert len(seen) >= 3
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)
    assert all(total == SIZE for _, total, _ in seen)
    assert seen[-1][0] == SIZE
    assert 0 < seen[1][0] < SIZE  # a mid-transfer update, parsed from rsync's own progress
    # rate-limited: rsync prints a burst of lines as it finishes, yet the updates parsed from its output come
    # at least an interval apart (less a margin for delivery: stamped on arrival, one may lag its send by a
    # busy loop turn; an unlimited burst comes ms apart); the last is the completion report, sent as is
    gaps = [b - a for a, b in itertools.pairwise(times[:-1])]
    assert gaps, times
    assert min(gaps) >= interval * 0.5, gaps
    assert len(seen) <= elapsed / interval + 2


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_transfer_stopped_by_its_time_limit_says_what_is_left_and_leaves_no_process(
    gateway_client: ClientFactory, sshd: SshdInstance, tmp_path: Path, remote_dir: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (remote_dir / "big").write_bytes(os.urandom(SIZE))
    seen: set[int] = set()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        for pid in pids_with_arg(str(root)):
            seen.update(group_members(pid) | {pid})

    async with gateway_client(**_config(sshd, root)) as (client, _):
        _ok(await client.call_tool("target_capabilities", {"target": "root"}))  # the copy's checks are warm
        args = {
            "target": "root",
            "local_path": "big",
            "remote_path": str(remote_dir / "big"),
            "bwlimit_kib_s": 512,  # 24 s to finish; the limit stops it well before
            "timeout_s": 8,
        }
        with anyio.fail_after(60):
            error = _err(await client.call_tool("remote_download", args, progress_callback=on_progress))
    assert error["code"] == "timeout"
    assert error["details"]["copy_started"] is True
    left = error["details"]["left_at_destination"]
    assert left["resumable"] is True
    assert 0 < left["partial_bytes"] < SIZE
    assert (root / ".rog-partial" / "big").stat().st_size == left["partial_bytes"]
    assert seen, "the transfer's processes were seen while it ran"
    assert not [pid for pid in seen if running(pid)]


@pytest.mark.anyio
async def test_the_demo_has_a_local_root_in_its_directory_and_transfers_work_there(tmp_path: Path) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="rogdt-", dir="/tmp"))
    try:
        base = Settings.model_validate({"state_dir": str(tmp_path / "state")})
        async with demo_settings(base, workdir) as settings:
            (local_root,) = settings.transfers.local_roots
            assert local_root == workdir / "transfers"
            (local_root / "hello.txt").write_bytes(b"hello from the demo\n")
            rt = Runtime(settings, all_specs(), redactor=Redactor())
            async with rt, Client(build_server(rt, stdio_principal="test"), mode="legacy") as client:
                args = {
                    "target": "demo",
                    "local_path": "hello.txt",
                    "remote_path": str(workdir / "uploaded.txt"),
                    "verify": "sha256",
                }
                up = _ok(await client.call_tool("remote_upload", args))
        assert up["verified"] == "sha256"
        assert (workdir / "uploaded.txt").read_bytes() == b"hello from the demo\n"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.sshd
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_call_the_client_cancels_stops_the_transfer_and_leaves_no_process(
    gateway_client: ClientFactory, sshd: SshdInstance, tmp_path: Path, remote_dir: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "big").write_bytes(os.urandom(SIZE))
    seen: set[int] = set()
    moving = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        for pid in pids_with_arg(str(root / "big")):
            seen.update(group_members(pid) | {pid})
        if progress > 0 and len(seen) >= 2:
            moving.set()

    args = {
        "target": "root",
        "local_path": "big",
        "remote_path": str(remote_dir / "big"),
        "bwlimit_kib_s": 512,  # 24 s to finish: far beyond the wait for the processes to go
    }
    with capture_logs() as logs, anyio.fail_after(60):
        async with gateway_client(**_config(sshd, root)) as (client, _):
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await client.call_tool("remote_upload", args, progress_callback=on_progress)

                tg.start_soon(call)
                await moving.wait()
                tg.cancel_scope.cancel()  # the client cancels its request (notifications/cancelled)
            with anyio.fail_after(10):
                while [pid for pid in seen if running(pid)]:  # noqa: ASYNC110 - the server reaps on its own
                    await anyio.sleep(0.05)
            health = await client.call_tool("gateway_health", {})  # the gateway still answers
            assert health.is_error is not True
    assert not (remote_dir / "big").exists()  # never completed, so nothing claims to be the file
    (report,) = [e for e in logs if e["event"] == "transfer_cancelled"]  # what is left, said once
    assert report["left_at_destination"]["destination"] == str(remote_dir / "big")
