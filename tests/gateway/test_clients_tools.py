"""The MCP Inspector CLI (the official TypeScript client, which validates ``structuredContent`` against each
tool's ``outputSchema``) drives every own tool family against the real gateway on the real sshd: files,
tasks, transfers and forwards, each with a success whose structured result the client accepts and a failure
whose error code it shows (no output-schema complaint)."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ensure_tool
from tests.fixtures.sshd import SshdInstance
from tests.gateway.test_clients import _failed_call, _inspect, _json_result

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


@pytest.fixture(scope="module")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory the target user may write (the target is this machine), with the local transfer root."""
    path = Path(tempfile.mkdtemp(prefix="rog-insp-", dir="/tmp"))
    path.chmod(0o777)
    (path / "local").mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(
    sshd: SshdInstance, shared: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
        "tasks": {"remote_dir": str(shared / "tasks")},
        "transfers": {"local_roots": [str(shared / "local")]},
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }
    with run_gateway(tmp_path_factory.mktemp("gw-insp"), config) as gw:
        yield gw


def _call(inspector: InstalledTool, gw: GatewayProcess, home: Path, tool: str, **args: Any) -> dict[str, Any]:
    """One successful tools/call through the Inspector; its structured content (the client checked it
    against the tool's outputSchema), plus ``carried``: a second text block's text (remote_read's content)."""
    pairs = [a for key, value in args.items() for a in ("--tool-arg", f"{key}={_arg(value)}")]
    run = _inspect(inspector, gw, home, "--method", "tools/call", "--tool-name", tool, *pairs)
    result = _json_result(run, gw)
    assert result.get("isError") is False, (tool, result, run.describe())
    structured = result["structuredContent"]
    assert isinstance(structured, dict)
    blocks = result["content"]
    return {**structured, "carried": blocks[1]["text"]} if len(blocks) > 1 else structured


def _arg(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _fail(inspector: InstalledTool, gw: GatewayProcess, home: Path, tool: str, **args: Any) -> str:
    code = _failed_call(inspector, gw, home, tool, *(f"{k}={_arg(v)}" for k, v in args.items()))["code"]
    assert isinstance(code, str)
    return code


def test_the_inspector_writes_reads_stats_and_lists_a_file_and_sees_not_found_for_a_missing_one(
    inspector: InstalledTool, gateway: GatewayProcess, shared: Path, tmp_path: Path
) -> None:
    path = str(shared / "notes.txt")
    text = "first line\nsecond: $HOME `x` 'q'\n"
    written = _call(inspector, gateway, tmp_path, "remote_write", target="plain", path=path, content=text)
    assert written["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    read = _call(inspector, gateway, tmp_path, "remote_read", target="plain", path=path)
    assert (read["carried"], read["truncated"]) == (text, False)
    stat = _call(inspector, gateway, tmp_path, "remote_stat", target="plain", path=path)
    assert stat["size"] == len(text.encode())
    listing = _call(inspector, gateway, tmp_path, "remote_list", target="plain", path=str(shared))
    assert "notes.txt" in json.dumps(listing)
    missing = str(shared / "absent.txt")
    assert _fail(inspector, gateway, tmp_path, "remote_read", target="plain", path=missing) == "not_found"


def test_the_inspector_reads_lines_makes_a_setgid_directory_and_sees_a_mixed_range_refused(
    inspector: InstalledTool, gateway: GatewayProcess, shared: Path, tmp_path: Path
) -> None:
    path = str(shared / "lines.txt")
    text = "one\ntwo\nthree\nfour"  # no final newline
    _call(inspector, gateway, tmp_path, "remote_write", target="plain", path=path, content=text)
    read = _call(
        inspector, gateway, tmp_path, "remote_read", target="plain", path=path, start_line=2, line_count=2
    )
    assert (read["carried"], read["more_lines"], read["offset"]) == ("two\nthree\n", True, 4)
    assert read["sha256"] == hashlib.sha256(text.encode()).hexdigest()  # the whole file's
    tail = _call(inspector, gateway, tmp_path, "remote_read", target="plain", path=path, start_line=4)
    assert (tail["carried"], tail["more_lines"]) == ("four", False)
    past = _call(inspector, gateway, tmp_path, "remote_read", target="plain", path=path, start_line=9)
    assert (past["carried"], past["past_end"]) == ("", True)
    mixed = {"target": "plain", "path": path, "start_line": 1, "offset": 3}
    assert _fail(inspector, gateway, tmp_path, "remote_read", **mixed) == "validation_error"
    made = _call(
        inspector, gateway, tmp_path, "remote_mkdir", target="plain", path=str(shared / "g"), mode=0o2775
    )
    assert (shared / "g").stat().st_mode & 0o7777 == 0o2775
    assert made["mode"] == "2775"


def test_the_inspector_starts_waits_for_and_reads_a_task_and_sees_not_found_for_an_unknown_id(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path
) -> None:
    started = _call(inspector, gateway, tmp_path, "task_start", target="plain", argv=["echo", "from-a-task"])
    task_id = started["id"]
    waited = _call(inspector, gateway, tmp_path, "task_wait", task_id=task_id, timeout_s=30)
    assert waited["outcome"] == "exited"
    output = _call(inspector, gateway, tmp_path, "task_output", task_id=task_id)
    assert "from-a-task" in output["data"]
    unknown = "t-" + "0" * 16
    assert _fail(inspector, gateway, tmp_path, "task_status", task_id=unknown) == "not_found"


def test_the_inspector_uploads_a_file_and_sees_a_local_path_outside_the_roots_refused(
    inspector: InstalledTool, gateway: GatewayProcess, shared: Path, tmp_path: Path
) -> None:
    source = shared / "local" / "payload.bin"
    source.write_bytes(b"\x00\x01payload\xff")
    destination = str(shared / "uploaded.bin")
    args = {"target": "plain", "local_path": str(source), "remote_path": destination, "verify": "sha256"}
    copied = _call(inspector, gateway, tmp_path, "remote_upload", **args)
    assert copied["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert Path(destination).read_bytes() == source.read_bytes()
    outside = {**args, "local_path": "/etc/hostname", "remote_path": str(shared / "x")}
    assert _fail(inspector, gateway, tmp_path, "remote_upload", **outside) == "policy_denied"


def test_the_inspector_creates_lists_and_closes_a_forward_and_sees_not_found_for_an_unknown_id(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a destination that listens on the target's loopback (this machine)
        probe.bind(("127.0.0.1", 0))
        probe.listen()
        port = probe.getsockname()[1]
        args = {"target": "plain", "kind": "local", "dest_host": "127.0.0.1", "dest_port": port}
        created = _call(inspector, gateway, tmp_path, "forward_create", **args)
        try:
            listed = _call(inspector, gateway, tmp_path, "forward_list")
            assert created["forward"]["id"] in {f["id"] for f in listed["forwards"]}
        finally:
            closed = _call(inspector, gateway, tmp_path, "forward_close", id=created["forward"]["id"])
    assert (closed["id"], closed["outcome"]) == (created["forward"]["id"], "terminated")
    unknown = "fwd-" + "0" * 12
    assert _fail(inspector, gateway, tmp_path, "forward_status", id=unknown) == "not_found"
