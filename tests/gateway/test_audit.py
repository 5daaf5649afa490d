"""Audit records: one per call, canonical fields, secrets digested or redacted — never in clear."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gateway._audit import AuditLog
from gateway._redact import Redactor, digest
from gateway.cli import upstream_secrets
from gateway.config import Settings
from tests.gateway.conftest import ClientFactory

SECRET = "hunter2-Planted-Secret-7f3a9"


def test_sensitive_keys_are_digested_and_patterns_redacted() -> None:
    r = Redactor()
    out = r.arguments(
        {
            "password": SECRET,
            "env": {"HARMLESS_NAME": SECRET},
            "stdin": SECRET,
            "argv": ["curl", "-H", f"Authorization: Bearer {SECRET}", f"--data=token={SECRET}"],
            "shell": f"mysql --password={SECRET}",
            "note": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n-----END OPENSSH PRIVATE KEY-----",
        }
    )
    assert SECRET not in json.dumps(out)
    expected = hashlib.sha256(SECRET.encode()).hexdigest()[:12]
    assert out["password"] == {"len": len(SECRET), "sha256_prefix": expected}
    assert out["env"]["HARMLESS_NAME"] == digest(SECRET)


def test_known_secrets_are_redacted_anywhere() -> None:
    r = Redactor([SECRET])
    assert SECRET not in r.text(f"the upstream said {SECRET} out loud")


def test_audit_file_rotates_by_size(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=4096, backups=2, redactor=Redactor())
    for i in range(200):
        log.tool_call(
            request_id=str(i),
            principal="p",
            tool="t",
            toolset="inspect",
            target=None,
            outcome="ok",
            error_code=None,
            duration_ms=1.0,
            arguments={"i": i},
        )
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert all((tmp_path / f).stat().st_size <= 4096 for f in files)
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600
    last = (tmp_path / "audit.jsonl").read_text().splitlines()[-1]
    assert json.loads(last)["request_id"] == "199"


@pytest.mark.anyio
async def test_a_planted_secret_never_reaches_the_audit_file(
    gateway_client: ClientFactory, capfd: pytest.CaptureFixture[str]
) -> None:
    async with gateway_client() as (client, rt):
        # A secret in a wrong (unknown) argument: refused, and still never written in clear.
        result = await client.call_tool("gateway_health", {"password": SECRET, "note": f"token={SECRET}"})
        assert result.is_error is True
        assert SECRET not in str(result.model_dump())
        await client.call_tool("gateway_health", {})
        audit_text = rt.settings.audit_path.read_text()
    records = [json.loads(line) for line in audit_text.splitlines()]
    assert len(records) == 2
    first = records[0]
    assert {
        "time",
        "request_id",
        "principal",
        "tool",
        "toolset",
        "target",
        "outcome",
        "error_code",
        "duration_ms",
    } <= set(first)
    assert first["error_code"] == "validation_error"
    assert first["tool"] == "gateway_health"
    assert first["toolset"] == "inspect"
    assert first["principal"] == "test"
    assert records[1]["outcome"] == "ok"
    assert SECRET not in audit_text
    captured = capfd.readouterr()
    assert SECRET not in captured.out + captured.err


@pytest.mark.anyio
async def test_an_unwritable_audit_file_shows_in_health_without_failing_calls(
    gateway_client: ClientFactory, tmp_path: Path
) -> None:
    blocked = tmp_path / "audit-is-a-directory"
    blocked.mkdir()
    async with gateway_client(audit={"path": str(blocked)}) as (client, _):
        with capture_logs() as logs:
            first = await client.call_tool("gateway_health", {})
        assert [e["event"] for e in logs if e["log_level"] == "error"] == ["audit_write_failed"]
        assert first.is_error is not True
        second = await client.call_tool("gateway_health", {})
    assert second.structured_content is not None
    audit = second.structured_content["audit"]
    assert audit["healthy"] is False
    assert audit["last_error"].startswith("IsADirectoryError")


def test_upstream_credentials_are_known_secrets_for_redaction(tmp_path: Path) -> None:
    token_file = tmp_path / "up-token"
    token_file.write_text("file-Token-0123456789\n")
    settings = Settings.model_validate(
        {
            "upstreams": [
                {
                    "connection": {
                        "name": "a",
                        "transport": "http",
                        "url": "http://127.0.0.1:1/mcp",
                        "headers": {"Authorization": "Bearer header-Token-0123456789"},
                    }
                },
                {
                    "connection": {
                        "name": "b",
                        "transport": "http",
                        "url": "http://127.0.0.1:2/mcp",
                        "bearer_token_file": str(token_file),
                    }
                },
            ]
        }
    )
    redactor = Redactor(upstream_secrets(settings))
    line = "upstream said header-Token-0123456789 and file-Token-0123456789"
    assert "Token-0123456789" not in redactor.text(line)
