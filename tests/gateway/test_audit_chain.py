"""The audit chain: sealed records, every tamper kind verified, rotation, restart, shipping, the key."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from structlog.testing import capture_logs

from gateway._redact import Redactor, digest
from gateway.audit.chain import load_key
from gateway.audit.log import AuditLog
from gateway.audit.ship import AuditShipper
from gateway.audit.verify import verify_files, verify_lines
from gateway.cli import main
from gateway.config import AuditShipSettings
from tests.fixtures.collector import run_collector
from tests.fixtures.gateway_proc import run_gateway

pytestmark = pytest.mark.anyio

TOKEN = "collector-token-0123456789abcdef"


def _record(log: AuditLog, i: int, **arguments: Any) -> None:
    log.tool_call(
        request_id=str(i),
        principal="p",
        tool="t",
        toolset="inspect",
        target=None,
        outcome="ok",
        error_code=None,
        duration_ms=1.0,
        arguments={"i": i, **arguments},
    )


def _log(state: Path, *, max_bytes: int = 1 << 20, backups: int = 3, **kw: Any) -> AuditLog:
    return AuditLog(
        state / "audit.jsonl",
        max_bytes=max_bytes,
        backups=backups,
        redactor=Redactor(),
        key_file=state / "audit.key",
        head_file=state / "audit.head",
        **kw,
    )


async def _write(state: Path, count: int, start: int = 0, **kw: Any) -> None:
    async with _log(state, **kw) as log:
        for i in range(start, start + count):
            _record(log, i)
            if i % 25 == 0:
                with anyio.fail_after(5):
                    await log.flush()


def _verify(state: Path, backups: int | None = 3) -> Any:
    key = load_key(state / "audit.key", create=False)
    return verify_files(state / "audit.jsonl", key, head_file=state / "audit.head", backups=backups)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


async def test_an_untouched_log_across_three_rotations_and_a_restart_verifies_clean(tmp_path: Path) -> None:
    await _write(tmp_path, 60, max_bytes=8192)
    await _write(tmp_path, 60, start=60, max_bytes=8192)  # a restart continues the chain
    names = sorted(p.name for p in tmp_path.glob("audit.jsonl*"))  # noqa: ASYNC240
    assert names == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2", "audit.jsonl.3"]
    report = _verify(tmp_path)
    assert report.problem is None, report.problem
    assert report.last_seq is not None
    assert report.records == report.last_seq - report.first_seq + 1
    first = json.loads(_lines(tmp_path / "audit.jsonl")[0])
    assert (first["event"], first["kind"]) == ("audit_chain", "rotation")  # every new file starts linked
    records = [json.loads(line) for line in _lines(tmp_path / "audit.jsonl")]
    assert [r["seq"] for r in records] == list(range(records[0]["seq"], records[0]["seq"] + len(records)))
    assert (tmp_path / "audit.key").stat().st_mode & 0o777 == 0o600


async def _tampered(tmp_path: Path, change: Any) -> Any:
    await _write(tmp_path, 20)
    path = tmp_path / "audit.jsonl"
    lines = _lines(path)
    path.write_bytes(b"".join(change(lines)))
    return _verify(tmp_path)


async def test_one_edited_byte_in_a_middle_record_is_found_at_that_record(tmp_path: Path) -> None:
    def edit(lines: list[bytes]) -> list[bytes]:
        lines[10] = lines[10].replace(b'"principal": "p"', b'"principal": "q"')
        return lines

    report = await _tampered(tmp_path, edit)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("edited", 10)
    assert report.problem.offset == sum(len(x) for x in _lines(tmp_path / "audit.jsonl")[:10])


async def test_a_deleted_record_is_found_with_the_missing_sequence_number(tmp_path: Path) -> None:
    report = await _tampered(tmp_path, lambda lines: lines[:7] + lines[8:])
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("deleted", 8)
    assert "7..7" in report.problem.detail


async def test_two_swapped_records_are_reported_as_reordered(tmp_path: Path) -> None:
    report = await _tampered(tmp_path, lambda lines: [*lines[:5], lines[6], lines[5], *lines[7:]])
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("reordered", 6)


async def test_an_inserted_record_is_reported_as_inserted(tmp_path: Path) -> None:
    def insert(lines: list[bytes]) -> list[bytes]:
        forged = (
            lines[4].replace(b'"request_id": "4"', b'"request_id": "x"').replace(b'"seq": 4', b'"seq": 5')
        )
        return [*lines[:5], forged, *lines[5:]]

    report = await _tampered(tmp_path, insert)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("inserted", 5)


async def test_a_cut_tail_whole_records_or_mid_line_is_reported_as_truncated(tmp_path: Path) -> None:
    report = await _tampered(tmp_path, lambda lines: lines[:-3])
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("truncated_tail", 17)
    path = tmp_path / "audit.jsonl"
    path.write_bytes(path.read_bytes()[:-20])
    report = _verify(tmp_path)
    assert report.problem is not None
    assert report.problem.kind == "truncated_tail"


async def test_a_cut_tail_found_at_restart_is_recorded_in_the_chain_and_reported(tmp_path: Path) -> None:
    await _write(tmp_path, 10)
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"".join(_lines(path)[:-2]))
    await _write(tmp_path, 3, start=10)  # the gateway starts again over the cut file
    record = json.loads(_lines(path)[8])
    assert record["chain"] == {"lost_from_seq": 8, "lost_to_seq": 9}  # never silent
    report = _verify(tmp_path)
    assert report.problem is not None
    assert report.problem.kind == "truncated_tail"


@pytest.mark.parametrize(
    ("deleted", "kind"), [("audit.jsonl.2", "missing_file"), ("audit.jsonl.3", "missing_file")]
)
async def test_a_deleted_rotated_file_is_reported(tmp_path: Path, deleted: str, kind: str) -> None:
    await _write(tmp_path, 120, max_bytes=8192)
    assert (tmp_path / "audit.jsonl.3").exists()
    assert _verify(tmp_path).problem is None
    (tmp_path / deleted).unlink()
    report = _verify(tmp_path)
    assert report.problem is not None
    assert report.problem.kind == kind


async def test_a_torn_line_from_a_crash_is_accounted_for_at_the_next_start(tmp_path: Path) -> None:
    await _write(tmp_path, 5)
    path = tmp_path / "audit.jsonl"
    with path.open("ab") as f:
        f.write(b'{"event": "tool_call", "torn by a cra')
    await _write(tmp_path, 2, start=5)
    assert json.loads(_lines(path)[-2])["chain"] == {"after_torn_line": True}
    assert _verify(tmp_path).problem is None


async def test_a_log_of_unchained_records_starts_a_new_epoch_recorded_as_such(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_text('{"tool": "old"}\n', encoding="utf-8")
    await _write(tmp_path, 3)
    first = json.loads(_lines(tmp_path / "audit.jsonl")[1])
    assert first["chain"] == {"epoch": "new", "reason": "unsealed_records"}
    report = _verify(tmp_path)
    assert report.problem is None
    assert report.epochs[0]["reason"] == "unsealed_records"


async def test_a_record_sealed_with_another_key_does_not_verify(tmp_path: Path) -> None:
    await _write(tmp_path, 5)
    (tmp_path / "other.key").write_text("ab" * 32 + "\n")
    (tmp_path / "other.key").chmod(0o600)
    report = verify_files(tmp_path / "audit.jsonl", load_key(tmp_path / "other.key", create=False))
    assert report.problem is not None
    assert report.problem.kind == "edited"


async def test_shipped_records_keep_their_chain_and_the_collector_verifies_them(tmp_path: Path) -> None:
    with run_collector(TOKEN) as collector:
        cfg = AuditShipSettings.model_validate(
            {"url": collector.url, "backoff_initial_s": 0.02, "timeout_s": 2}
        )
        shipper = AuditShipper(cfg, tmp_path / "spool", token=TOKEN, close_timeout_s=2)
        async with _log(tmp_path, max_bytes=8192, shipper=shipper) as log:
            for i in range(80):
                _record(log, i)
            with anyio.fail_after(10):
                await log.flush()
                await shipper.wait_delivered()
    stored = sorted(collector.stored, key=lambda s: s.seq)
    key = load_key(tmp_path / "audit.key", create=False)
    report = collector.verify(key)
    assert report.problem is None, report.problem
    assert report.records == len(stored) > 80  # the records and the rotation headers
    dropped = [s.line for s in stored]
    del dropped[30]
    gap = verify_lines(dropped, key)
    assert gap.problem is not None
    assert gap.problem.kind == "deleted"


async def test_the_mac_key_is_in_no_log_record_or_config_check_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with capture_logs() as logs:
        await _write(tmp_path, 5)
    key_hex = load_key(tmp_path / "audit.key", create=False).hex()
    everything = (
        json.dumps(logs) + (tmp_path / "audit.jsonl").read_text() + (tmp_path / "audit.head").read_text()
    )
    assert key_hex not in everything
    config = tmp_path / "gw.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n[audit]\nkey_file = "{tmp_path / "audit.key"}"\n')
    assert main(["config", "check", "--config", str(config)]) == 0
    assert main(["audit", "verify", "--config", str(config)]) == 0
    out = capsys.readouterr()
    assert key_hex not in out.out + out.err


@pytest.mark.slow  # a gateway subprocess
async def test_a_planted_mac_key_is_in_no_log_line_audit_record_result_or_config_check_of_a_real_gateway(
    tmp_path: Path,
) -> None:
    """The key is a known value (a configured key file, as a systemd credential would be) and is planted
    where a careless path would echo it: a command's argv and env, a field name that fails validation, an
    unknown target. Every output is then searched: the gateway's stderr at debug level, every audit file
    and the head, every result, ``config check`` and ``audit verify``. (Not planted: an unknown tool's
    name, which the protocol error echoes back to the caller who sent it, unredacted.)"""
    key_hex = secrets.token_hex(32)
    key_file = tmp_path / "audit-credential"
    key_file.write_text(key_hex + "\n", encoding="ascii")
    key_file.chmod(0o600)
    (tmp_path / "gw").mkdir()
    config = {
        "log_level": "debug",
        "audit": {"key_file": str(key_file)},
        "targets": [{"name": "t1", "host": "127.0.0.1", "port": 1}],  # nothing listens: connect_error
    }
    planted_calls: list[tuple[str, dict[str, Any]]] = [
        ("remote_exec", {"target": "t1", "argv": ["echo", key_hex], "env": {"K": key_hex}}),
        ("remote_exec", {"target": "t1", "argv": ["true"], key_hex: 1}),  # validation_error names the field
        ("remote_exec", {"target": key_hex, "argv": ["true"]}),  # an unknown target
        ("gateway_health", {}),
    ]
    results: list[str] = []
    with run_gateway(tmp_path / "gw", config) as gw:
        http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
        async with http, Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client:
            with anyio.fail_after(60):
                results.append((await client.list_tools()).model_dump_json())
                for name, arguments in planted_calls:
                    try:
                        results.append((await client.call_tool(name, arguments)).model_dump_json())
                    except MCPError as exc:  # a protocol-level refusal: its message is a result too
                        results.append(f"{exc.error.code} {exc.error.message} {exc.error.data}")
    assert gw.exit_code == 0
    state = gw.state_dir
    audit_text = "".join(p.read_text(encoding="utf-8") for p in sorted(state.glob("audit.jsonl*")))
    records = [json.loads(line) for line in audit_text.splitlines()]
    planted = [r for r in records if "[REDACTED]" in json.dumps(r)]
    assert len(planted) == 3, records  # positive control: the planted calls reached the audit, masked
    config_path = tmp_path / "gw" / "gateway.toml"
    checks = []
    for argv in (["config", "check"], ["audit", "verify"]):
        done = subprocess.run(  # noqa: ASYNC221 - a short command line run, bounded
            [sys.executable, "-m", "gateway", "--config", str(config_path), *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        checks.append(done.stdout + done.stderr)
    outputs = {
        "stderr": gw.stderr_text(),
        "audit": audit_text,
        "head": (state / "audit.head").read_text(encoding="ascii"),
        "results": "\n".join(results),
        "config check": checks[0],
        "audit verify": checks[1],
        "state files": "".join(
            p.read_text(encoding="utf-8", errors="replace") for p in state.rglob("*") if p.is_file()
        ),
    }
    assert len(results) == len(planted_calls) + 1
    found = [name for name, text in outputs.items() if key_hex in text or key_hex.upper() in text]
    assert found == []


async def test_audit_verify_exits_0_intact_1_tampered_2_without_a_key(tmp_path: Path) -> None:
    await _write(tmp_path, 10)
    config = tmp_path / "gw.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n')
    assert main(["audit", "verify", "--config", str(config)]) == 0
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"".join(_lines(path)[:-1]))
    assert main(["audit", "verify", "--config", str(config)]) == 1
    assert (
        main(["audit", "verify", "--config", str(config), "--from", str(path)]) == 0
    )  # no head: no tail check
    assert main(["audit", "verify", "--config", str(config), "--key", str(tmp_path / "nokey")]) == 2


async def test_a_one_mebibyte_argument_is_recorded_as_its_digest_not_whole(tmp_path: Path) -> None:
    async with _log(tmp_path) as log:
        _record(log, 1, blob="A" * (1 << 20))
        _record(log, 2, many=["word"] * 100_000)
    lines = _lines(tmp_path / "audit.jsonl")
    assert all(len(line) < 20_000 for line in lines)
    first, second = (json.loads(line)["arguments"] for line in lines)
    assert first["blob"]["len"] == 1 << 20
    assert first["blob"]["capped"] is True
    assert second["capped"] is True


# Throughput and verification speed are measured by acceptance/bench_audit.py (a table, interleaved rounds,
# wall and CPU time), not asserted here: a timing is no test on a shared machine.


def test_the_well_known_credential_shapes_are_masked_in_any_redacted_text() -> None:
    planted = {
        "aws_secret": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_key_id": "AKIAIOSFODNN7EXAMPLE",
        "github": "ghp_" + "a1B2" * 9,
        "gitlab": "glpat-" + "x1Y2z3" * 4,
        "slack": "xoxb-123456789012-abcdefghijkl",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "db_token": "DB_TOKEN_VALUE=s3cr3t-t0k3n-value",
        "url": "postgres://admin:pa55w0rd-in-url@db.example.net/app",
    }
    secrets = {
        "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "db_token": "s3cr3t-t0k3n-value",
        "url": "pa55w0rd-in-url",
        "pem": "MIIEowIBAAKCAQEA",
    }
    r = Redactor()
    for name, text in planted.items():
        masked, kinds = r.scrub(f"upstream stderr: {text} (end)")
        assert secrets.get(name, text) not in masked, name
        assert kinds, name
    assert r.scrub("an ordinary line of output, 42 files, key: none")[1] == {}
    assert r.scrub("an ordinary line of output")[1] == {}


def test_relayed_arguments_are_digested_by_default_and_clear_only_by_opt_in() -> None:
    from gateway.config import UpstreamEntry

    keys = "correct horse battery staple\n"
    digested = Redactor.digest_values({"keys": keys, "literal": True, "session": None})
    assert digested["keys"] == {"len": len(keys), "sha256_prefix": digest(keys)["sha256_prefix"]}
    assert digested["literal"] is True
    assert digested["session"] is None
    entry = UpstreamEntry.model_validate(
        {"connection": {"name": "term", "transport": "stdio", "command": ["x"]}}
    )
    assert entry.audit_arguments == "digest"


PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
)
CLOUD = "AKIAIOSFODNN7EXAMPLE"


def test_output_scrubbing_masks_and_counts_planted_keys_and_is_off_by_default() -> None:
    from gateway._dispatch import scrub_output
    from gateway.config import Settings

    assert Settings().redaction.output == "off"  # off: results are not touched at all (_run_own)
    facts: dict[str, Any] = {}
    exec_out = {"exit_code": 0, "stdout": f"{PEM}\nkey={CLOUD}\n", "stderr": ""}
    [text], out, note = scrub_output(Redactor(), [f"exit 0\n{PEM}\n{CLOUD}"], exec_out, facts)
    assert PEM not in out["stdout"]
    assert CLOUD not in out["stdout"]
    assert PEM not in text
    assert CLOUD not in text
    assert note is not None
    assert note["count"] == 2
    assert set(note["kinds"]) == {"private_key", "aws_access_key_id"}
    assert set(out) == set(exec_out)  # the structured content keeps the tool's schema (no extra member)
    assert "output scrubbing masked 2 secret(s)" in text  # the text says so
    assert facts["redacted"] == note  # in the audit record too
    read_out = {"path": "/etc/app/.env", "encoding": "utf-8"}
    file = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG\n"  # carried in the second text block
    [_, masked], _, read_note = scrub_output(Redactor(), ["/etc/app/.env: 44 bytes", file], read_out, {})
    assert "wJalrXUtnFEMI/K7MDENG" not in masked
    assert read_note is not None
    assert read_note["count"] == 1
    b64 = {"path": "/k", "encoding": "base64"}
    key = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ=="
    texts, unchanged, skipped = scrub_output(Redactor(), ["", key], b64, {})
    assert (texts, unchanged) == (["", key], b64)
    assert skipped is not None
    assert skipped["count"] == 0
    assert "skipped" in skipped
    clean = {"stdout": "hello\n"}
    assert scrub_output(Redactor(), ["hello"], clean, {}) == (
        ["hello"],
        clean,
        None,
    )  # nothing found: as it was


def test_a_secret_used_as_an_argument_name_is_masked_in_the_audit_record() -> None:
    secret = "0123456789abcdef" * 4
    r = Redactor([secret])
    record = r.audit_arguments({"target": "t1", secret: 1, "nested": {f"x-{secret}": "v"}})
    assert secret not in json.dumps(record)
    assert record["target"] == "t1"
    assert secret not in json.dumps(r.any({secret: {"AKIAIOSFODNN7EXAMPLE": 1}}))
