"""The remote file tools through MCP against the real OpenSSH sshd: schemas, encodings, error codes."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import mcp_types as types
import pytest

from gateway._dispatch import error_payload
from tests.fixtures.mcp_client import carried
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory

pytestmark = pytest.mark.anyio
Z = "0" * 64  # a SHA-256 no content has


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A short directory the target's plain user can write to (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogf-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _config(sshd: SshdInstance, **extra: Any) -> dict[str, Any]:
    return {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "plain", "host": sshd.alias("plain"), "protected_paths": ["/srv"]}],
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
        **extra,
    }


def _code(result: Any) -> str:
    assert result.is_error is True, result
    error = error_payload(result)
    assert error is not None, result
    return str(error["code"])


async def test_write_read_stat_and_list_through_mcp_match_their_schemas_and_the_file(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    raw_name = b"odd \xff $x `y`"
    path_b64 = base64.b64encode(os.fsencode(shared_tmp) + b"/" + raw_name).decode()
    binary = bytes(range(256))
    async with gateway_client(**_config(sshd)) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        text = await client.call_tool(
            "remote_write", {"target": "plain", "path": f"{shared_tmp}/a.txt", "content": "héllo\n"}
        )
        blob = await client.call_tool(
            "remote_write",
            {"target": "plain", "path_b64": path_b64, "content": base64.b64encode(binary).decode(),
             "encoding": "base64", "mode": 0o600},
        )  # fmt: skip
        read = await client.call_tool("remote_read", {"target": "plain", "path": f"{shared_tmp}/a.txt"})
        read_b = await client.call_tool(
            "remote_read", {"target": "plain", "path_b64": path_b64, "encoding": "base64", "offset": 250}
        )
        stat = await client.call_tool(
            "remote_stat", {"target": "plain", "path_b64": path_b64, "sha256": True}
        )
        listing = await client.call_tool("remote_list", {"target": "plain", "path": str(shared_tmp)})
        results = {"remote_write": text, "remote_read": read, "remote_stat": stat, "remote_list": listing}
        for name, result in results.items():
            assert result.is_error is not True, result
            jsonschema.validate(result.structured_content, tools[name].output_schema)
    assert blob.is_error is not True
    assert text.structured_content["sha256"] == hashlib.sha256("héllo\n".encode()).hexdigest()
    # the content travels once: the second text block, not in structuredContent (its schema lets it out)
    assert "content" not in read.structured_content
    summary, shown = [block.text for block in read.content if isinstance(block, types.TextContent)]
    assert shown == "héllo\n"
    assert summary.startswith(f"{shared_tmp}/a.txt: 7 of 7 bytes from 0")
    assert base64.b64decode(carried(read_b)) == binary[250:]
    assert (stat.structured_content["mode"], stat.structured_content["size"]) == ("0600", 256)
    assert stat.structured_content["sha256"] == hashlib.sha256(binary).hexdigest()
    entries = listing.structured_content["entries"]
    assert [base64.b64decode(e["path_b64"]) if e["path_b64"] else e["path"].encode() for e in entries] == [
        b"a.txt",
        raw_name,
    ]
    assert (shared_tmp / os.fsdecode(raw_name)).read_bytes() == binary


async def test_utf8_reads_refuse_invalid_bytes_unless_replaced_and_keep_whole_characters_at_the_cap(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    (shared_tmp / "bin").write_bytes(b"ok\xff\xfe")
    (shared_tmp / "snow").write_bytes("☃".encode() * 3000)  # 9000 bytes; the cap (4096) cuts a character
    async with gateway_client(**_config(sshd, transport={
        "ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir),
        "output_cap_bytes": 4096})) as (client, _):  # fmt: skip
        strict = await client.call_tool("remote_read", {"target": "plain", "path": f"{shared_tmp}/bin"})
        replaced = await client.call_tool(
            "remote_read", {"target": "plain", "path": f"{shared_tmp}/bin", "errors": "replace"}
        )
        capped = await client.call_tool("remote_read", {"target": "plain", "path": f"{shared_tmp}/snow"})
        lines = await client.call_tool(
            "remote_read", {"target": "plain", "path": f"{shared_tmp}/snow", "line_count": 1}
        )
    assert _code(strict) == "validation_error"
    assert carried(replaced) == "ok\ufffd\ufffd"
    out = capped.structured_content
    assert (carried(capped), out["length"], out["truncated"]) == ("☃" * 1365, 4095, True)
    assert out["remaining"] == 9000 - 4095
    # one 9000-byte line: the cap cuts it, so no whole line came back (continue by bytes from 4095)
    cut = lines.structured_content
    assert (carried(lines), cut["line_count"], cut["truncated"], cut["more_lines"]) == (
        "☃" * 1365,
        0,
        True,
        True,
    )
    assert (cut["offset"], cut["length"], cut["remaining"]) == (0, 4095, 9000 - 4095)


async def test_file_failures_map_to_not_found_conflict_privilege_policy_and_validation_codes(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    (shared_tmp / "f").write_bytes(b"one")
    (shared_tmp / "f").chmod(0o666)  # created by root: the plain user may write it
    secret = shared_tmp / "root-only"
    secret.write_bytes(b"x")
    os.chown(secret, 0, 0)
    secret.chmod(0o600)
    home = f"/home/{sshd.users['plain']}"
    in_home = sorted(os.listdir(home))
    async with gateway_client(**_config(sshd)) as (client, _):
        calls = {
            "not_found": ("remote_stat", {"path": f"{shared_tmp}/missing"}),
            "conflict": ("remote_write", {"path": f"{shared_tmp}/f", "content": "2", "expected_sha256": Z}),
            "privilege_error": ("remote_read", {"path": str(secret)}),
            "policy_denied": ("remote_delete", {"path": home, "recursive": True}),
            "validation_error": ("remote_delete", {"path": str(shared_tmp)}),
        }  # fmt: skip
        codes = {}
        for expected, (tool, args) in calls.items():
            codes[expected] = _code(await client.call_tool(tool, {"target": "plain", **args}))
        protected = _code(await client.call_tool("remote_delete", {"target": "plain", "path": "/srv/x"}))
        too_big = await client.call_tool(
            "remote_write", {"target": "plain", "path": f"{shared_tmp}/g", "content": "x" * (65 * 1024)}
        )
    assert codes == {code: code for code in calls}
    assert protected == "policy_denied"
    assert _code(too_big) == "validation_error"
    error = error_payload(too_big)
    assert error is not None
    assert (error["details"]["argument"], error["details"]["use"]) == ("content", "remote_upload")
    assert (shared_tmp / "f").read_bytes() == b"one"
    assert not (shared_tmp / "g").exists()
    # nothing in the home was deleted (tests on other workers may add entries to this shared home)
    assert set(in_home) <= set(os.listdir(home))


async def test_remote_stat_with_sha256_of_an_unreadable_file_returns_its_metadata_and_the_reason(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    secret = shared_tmp / "root-only"
    secret.write_bytes(b"secret")
    os.chown(secret, 0, 0)
    secret.chmod(0o600)
    async with gateway_client(**_config(sshd)) as (client, _):
        schema = {t.name: t for t in (await client.list_tools()).tools}["remote_stat"].output_schema
        stat = await client.call_tool("remote_stat", {"target": "plain", "path": str(secret), "sha256": True})
    assert stat.is_error is not True, stat
    jsonschema.validate(stat.structured_content, schema)
    out = stat.structured_content
    assert (out["type"], out["size"], out["mode"], out["owner"]) == ("file", 6, "0600", "root")
    assert (out["sha256"], out["sha256_error"]) == (None, "permission_denied")


async def test_remote_mkdir_applies_a_setgid_mode_exactly_and_reports_the_mode(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    async with gateway_client(**_config(sshd)) as (client, _):
        made = await client.call_tool(
            "remote_mkdir", {"target": "plain", "path": f"{shared_tmp}/team", "mode": 0o2775}
        )
        default = await client.call_tool("remote_mkdir", {"target": "plain", "path": f"{shared_tmp}/d"})
    assert made.is_error is not True, made
    assert (made.structured_content["mode"], made.structured_content["created"]) == ("2775", True)
    assert (shared_tmp / "team").stat().st_mode & 0o7777 == 0o2775
    # without a mode: the umask's default, never a world-writable 0777
    assert default.structured_content["mode"] == f"{(shared_tmp / 'd').stat().st_mode & 0o7777:04o}"
    assert (shared_tmp / "d").stat().st_mode & 0o022 == 0


async def test_delete_is_in_the_teardown_toolset_and_absent_without_it(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    async with gateway_client(**_config(sshd, tools={"toolsets": ["inspect", "execute"]})) as (client, _):
        names = {t.name for t in (await client.list_tools()).tools}
    assert {
        "remote_stat",
        "remote_read",
        "remote_list",
        "remote_write",
        "remote_mkdir",
        "remote_move",
    } <= names
    assert "remote_delete" not in names


async def test_remote_patch_names_the_failing_hunk_and_otherwise_returns_the_new_sha256(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    path = shared_tmp / "p.conf"
    path.write_bytes(b"a = 1\nb = 2\nc = 3\n")
    path.chmod(0o666)
    hunks = [{"old": "a = 1", "new": "a = 10"}, {"old": "b = 2", "new": "b = 20"}, {"old": "zzz", "new": "y"}]
    async with gateway_client(**_config(sshd)) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        failed = await client.call_tool(
            "remote_patch", {"target": "plain", "path": str(path), "hunks": hunks}
        )
        unchanged = path.read_bytes()
        done = await client.call_tool(
            "remote_patch", {"target": "plain", "path": str(path), "hunks": hunks[:2]}
        )
    assert _code(failed) == "conflict"
    error = error_payload(failed)
    assert error is not None
    assert (error["details"]["reason"], error["details"]["hunk"]) == ("hunk_mismatch", 3)
    assert unchanged == b"a = 1\nb = 2\nc = 3\n"
    assert done.is_error is not True
    jsonschema.validate(done.structured_content, tools["remote_patch"].output_schema)
    assert done.structured_content["sha256"] == hashlib.sha256(b"a = 10\nb = 20\nc = 3\n").hexdigest()
    assert path.read_bytes() == b"a = 10\nb = 20\nc = 3\n"
    [text] = [block.text for block in done.content if isinstance(block, types.TextContent)]
    assert "\n" not in text  # a one-line summary like the other file tools, not the JSON again
    assert not text.startswith("{")
    assert done.structured_content["path"] in text


async def test_remote_find_and_remote_grep_through_mcp_match_their_schemas(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    (shared_tmp / "x.conf").write_bytes(b"listen 80\nlisten 443\n")
    (shared_tmp / "y.bin").write_bytes(b"listen\0\n")
    async with gateway_client(**_config(sshd)) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        find = await client.call_tool(
            "remote_find", {"target": "plain", "path": str(shared_tmp), "name": "*.conf"}
        )
        grep = await client.call_tool(
            "remote_grep", {"target": "plain", "path": str(shared_tmp), "pattern": r"listen \d+"}
        )
        bad = await client.call_tool(
            "remote_grep", {"target": "plain", "path": str(shared_tmp), "pattern": "("}
        )
    for name, result in (("remote_find", find), ("remote_grep", grep)):
        assert result.is_error is not True, result
        jsonschema.validate(result.structured_content, tools[name].output_schema)
    assert [e["path"] for e in find.structured_content["entries"]] == ["x.conf"]
    assert [(m["line"], m["text"]) for m in grep.structured_content["matches"]] == [
        (1, "listen 80"),
        (2, "listen 443"),
    ]
    assert grep.structured_content["skipped"] == [{"path": "y.bin", "reason": "binary"}]
    assert _code(bad) == "validation_error"


async def test_remote_read_by_lines_says_which_lines_and_refuses_a_byte_range_with_them(
    gateway_client: ClientFactory, sshd: SshdInstance, shared_tmp: Path
) -> None:
    content = "a = 1\nb = ☃\n\nlast".encode()  # an empty line, no final newline
    (shared_tmp / "c.conf").write_bytes(content)
    path = str(shared_tmp / "c.conf")
    async with gateway_client(**_config(sshd)) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        middle = await client.call_tool(
            "remote_read", {"target": "plain", "path": path, "start_line": 2, "line_count": 2}
        )
        rest = await client.call_tool(
            "remote_read", {"target": "plain", "path": path, "start_line": 4, "encoding": "base64"}
        )
        past = await client.call_tool("remote_read", {"target": "plain", "path": path, "start_line": 5})
        both = await client.call_tool(
            "remote_read", {"target": "plain", "path": path, "length": 3, "line_count": 1}
        )
        zero = await client.call_tool("remote_read", {"target": "plain", "path": path, "start_line": 0})
    for result in (middle, rest, past):
        assert result.is_error is not True, result
        jsonschema.validate(result.structured_content, tools["remote_read"].output_schema)
    out = middle.structured_content
    assert (carried(middle), out["offset"], out["length"]) == ("b = ☃\n\n", 6, len("b = ☃\n\n".encode()))
    assert (out["start_line"], out["line_count"], out["more_lines"], out["past_end"]) == (2, 2, True, False)
    assert (out["size"], out["sha256"]) == (len(content), hashlib.sha256(content).hexdigest())
    assert base64.b64decode(carried(rest)) == b"last"
    assert (rest.structured_content["line_count"], rest.structured_content["more_lines"]) == (1, False)
    assert (carried(past), past.structured_content["past_end"]) == ("", True)
    summary, _ = [block.text for block in middle.content if isinstance(block, types.TextContent)]
    assert summary.endswith("lines 2-3 (9 of 19 bytes from 6), more lines follow; sha256 " + out["sha256"])
    assert (_code(both), _code(zero)) == ("validation_error", "validation_error")
    refused = error_payload(both)
    assert refused is not None
    assert [e["loc"] for e in refused["details"]["errors"]] == [["line_count"]]


async def test_a_relative_remote_path_is_taken_from_the_remote_users_home_directory(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    name = f"rog-relative-{os.getpid()}-{os.urandom(4).hex()}.txt"
    async with gateway_client(**_config(sshd)) as (client, _):
        wrote = await client.call_tool("remote_write", {"target": "plain", "path": name, "content": "here\n"})
        shown = await client.call_tool(
            "remote_exec",
            {"target": "plain", "argv": ["sh", "-c", f'cat "$HOME/{name}"; rm -f "$HOME/{name}"']},
        )
    assert wrote.is_error is not True, wrote
    assert shown.structured_content is not None
    assert shown.structured_content["stdout"] == "here\n"
