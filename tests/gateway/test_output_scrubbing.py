"""Opt-in output scrubbing (``[redaction] output = "mask"``) of own tools' results, through MCP against the
real OpenSSH sshd: a planted private key and cloud key in ``remote_exec`` stdout and in a ``remote_read`` text
result are masked and counted (``_meta``, the text, the audit record); with scrubbing off they pass
unchanged; a base64 read is byte-exact either way. The SDK client validates every ``structuredContent``
against the tool's ``outputSchema`` (as the TypeScript clients do): a masked result must still match it, and
the official Inspector CLI accepts one from a gateway subprocess."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway._dispatch import REDACTED_META_KEY
from tests.fixtures.gateway_proc import run_gateway
from tests.fixtures.mcp_client import carried
from tests.fixtures.node_tools import INSPECTOR, ensure_tool
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory, read_audit
from tests.gateway.test_clients import _inspect, _json_result

pytestmark = pytest.mark.anyio

PEM_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
PEM = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----"
CLOUD = "AKIAIOSFODNN7EXAMPLE"
PLANTED = f"config line\n{PEM}\naws_access_key_id {CLOUD}\nlast line\n"
KINDS = {"private_key": 1, "aws_access_key_id": 1}


@pytest.fixture
def planted() -> Iterator[Path]:
    """A file holding a private key and a cloud key id, readable by the target's plain user (the target
    is this machine)."""
    work = Path(tempfile.mkdtemp(prefix="rogscrub-", dir="/tmp"))
    work.chmod(0o755)
    path = work / "secrets.txt"
    path.write_text(PLANTED, encoding="utf-8")
    path.chmod(0o644)
    try:
        yield path
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _settings(sshd: SshdInstance, output: str | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "plain", "host": sshd.alias("plain")}],
    }
    if output is not None:
        cfg["redaction"] = {"output": output}
    return cfg


def _secrets_in(text: str) -> list[str]:
    return [s for s in (PEM_BODY, CLOUD) if s in text]


def _note(result: Any) -> Any:
    return (result.meta or {}).get(REDACTED_META_KEY)


async def test_with_scrubbing_on_keys_in_remote_exec_stdout_are_masked_and_counted_in_meta_text_and_audit(
    gateway_client: ClientFactory, sshd: SshdInstance, planted: Path
) -> None:
    async with gateway_client(**_settings(sshd, "mask")) as (client, rt):
        result = await client.call_tool("remote_exec", {"target": "plain", "argv": ["cat", str(planted)]})
        audit = [json.loads(line) for line in (await read_audit(rt)).splitlines()]
    assert result.is_error is not True
    out = result.structured_content
    assert out is not None
    assert out["exit_code"] == 0
    assert _secrets_in(out["stdout"]) == []
    assert out["stdout"].startswith("config line\n")  # the rest of the output is as it was
    assert out["stdout"].endswith("last line\n")
    assert "redacted" not in out  # the note is not in structuredContent: the output schema forbids it
    assert _note(result) == {"count": 2, "kinds": KINDS}
    text = result.content[0].text
    assert _secrets_in(text) == []
    assert "output scrubbing masked 2 secret(s)" in text
    record = next(r for r in audit if r["tool"] == "remote_exec")
    assert record["facts"]["redacted"] == {"count": 2, "kinds": KINDS}


async def test_with_scrubbing_on_keys_in_a_remote_read_text_result_are_masked_and_a_base64_read_is_untouched(
    gateway_client: ClientFactory, sshd: SshdInstance, planted: Path
) -> None:
    async with gateway_client(**_settings(sshd, "mask")) as (client, rt):
        text_read = await client.call_tool("remote_read", {"target": "plain", "path": str(planted)})
        raw_read = await client.call_tool(
            "remote_read", {"target": "plain", "path": str(planted), "encoding": "base64"}
        )
        audit = [json.loads(line) for line in (await read_audit(rt)).splitlines()]
    assert text_read.is_error is not True
    assert raw_read.is_error is not True
    assert text_read.structured_content is not None
    assert _secrets_in(carried(text_read)) == []
    assert _note(text_read) == {"count": 2, "kinds": KINDS}
    assert base64.b64decode(carried(raw_read)) == PLANTED.encode()  # byte-exact: never altered
    skipped = _note(raw_read)
    assert skipped["count"] == 0
    assert "base64" in skipped["skipped"]  # and it says so
    reads = [r for r in audit if r["tool"] == "remote_read"]
    assert [r["facts"]["redacted"]["count"] for r in reads] == [2, 0]


@pytest.mark.parametrize("output", [None, "off"], ids=["default", "off"])
async def test_with_scrubbing_off_the_planted_keys_pass_unchanged(
    gateway_client: ClientFactory, sshd: SshdInstance, planted: Path, output: str | None
) -> None:
    async with gateway_client(**_settings(sshd, output)) as (client, _):
        ran = await client.call_tool("remote_exec", {"target": "plain", "argv": ["cat", str(planted)]})
        read = await client.call_tool("remote_read", {"target": "plain", "path": str(planted)})
        raw = await client.call_tool(
            "remote_read", {"target": "plain", "path": str(planted), "encoding": "base64"}
        )
    assert ran.structured_content is not None
    assert ran.structured_content["stdout"] == PLANTED
    assert read.structured_content is not None
    assert carried(read) == PLANTED
    assert raw.structured_content is not None
    assert base64.b64decode(carried(raw)) == PLANTED.encode()
    assert [_note(r) for r in (ran, read, raw)] == [None, None, None]


@pytest.mark.slow  # a gateway subprocess and the Inspector (node)
@pytest.mark.sshd
def test_the_inspector_cli_accepts_a_masked_remote_exec_result_against_its_output_schema(
    sshd: SshdInstance, planted: Path, tmp_path: Path
) -> None:
    inspector = ensure_tool(INSPECTOR)
    (tmp_path / "gw").mkdir()
    (tmp_path / "home").mkdir()
    with run_gateway(tmp_path / "gw", _settings(sshd, "mask")) as gw:
        run = _inspect(
            inspector,
            gw,
            tmp_path / "home",
            "--method",
            "tools/call",
            "--tool-name",
            "remote_exec",
            "--tool-arg",
            "target=plain",
            "--tool-arg",
            f'argv=["cat", "{planted}"]',
        )
        result = _json_result(run, gw)
    assert result.get("isError") is False, (result, run.describe())
    assert _secrets_in(json.dumps(result)) == []
    assert result["_meta"][REDACTED_META_KEY] == {"count": 2, "kinds": KINDS}
    assert result["structuredContent"]["exit_code"] == 0
