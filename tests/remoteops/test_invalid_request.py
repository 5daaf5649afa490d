"""Input that cannot be run as given ends as InvalidRequest (a RemoteOpsError naming the field), never as a
bare ValueError/OSError escaping the exception tree; the gateway maps it onto ``validation_error``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway._errmap import translate
from gateway._errors import ErrorCode
from remoteops import InvalidRequest, RemoteOps, RemoteOpsError, TargetSpec, TransportSettings, render_command
from remoteops._render import MAX_COMMAND_BYTES
from remoteops.embedded import EmbeddedTarget

_TIMEOUT = 30.0

# (argv, cwd, env, the field InvalidRequest must name)
REFUSED: list[tuple[list[str], str | None, dict[str, str], str]] = [
    ([], None, {}, "argv"),
    ([""], None, {}, "argv[0]"),
    (["a\0b"], None, {}, "argv[0]"),
    (["printf", "%s", "x\0"], None, {}, "argv[2]"),
    (["echo", "lone \ud800 surrogate"], None, {}, "argv[1]"),
    (["true"], "/tmp\0/x", {}, "cwd"),
    (["true"], "/tmp/\udcff", {}, "cwd"),
    (["true"], None, {"GREETING": "a\0b"}, "env.GREETING"),
    (["true"], None, {"GREETING": "\ud83d"}, "env.GREETING"),
    (["true"], None, {"A B": "x"}, "env.A B"),
    (["true"], None, {"X\0Y": "x"}, "env.X\\x00Y"),
    (["printf", "x" * MAX_COMMAND_BYTES], None, {}, "argv"),
]
IDS = ["empty", "empty-program", "nul-argv0", "nul-argv2", "surrogate", "nul-cwd", "surrogate-cwd",
       "nul-env-value", "surrogate-env-value", "bad-env-name", "nul-env-name", "too-long"]  # fmt: skip


@pytest.mark.parametrize(("argv", "cwd", "env", "field"), REFUSED, ids=IDS)
def test_rendering_refuses_unrunnable_input_with_invalid_request_naming_the_field(
    argv: list[str], cwd: str | None, env: Mapping[str, str], field: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        render_command(argv, time_limit_s=5, cwd=cwd, env=env)
    assert info.value.field == field
    assert info.value.reason
    assert len(str(info.value)) < 300  # bounded even for a 128 KiB argv word
    assert isinstance(info.value, RemoteOpsError)


@pytest.mark.parametrize("limit", [0, -1, float("nan")])
def test_a_time_limit_that_is_not_positive_is_an_invalid_request(limit: float) -> None:
    with pytest.raises(InvalidRequest) as info:
        render_command(["true"], time_limit_s=limit)
    assert info.value.field == "time_limit_s"


def test_the_longest_command_line_that_fits_is_still_rendered() -> None:
    fixed = len(render_command(["printf"], time_limit_s=5, nonce="0" * 16).text.encode())
    word = "x" * (MAX_COMMAND_BYTES - fixed - 1)  # one space separates the words
    rendered = render_command(["printf", word], time_limit_s=5, nonce="0" * 16)
    assert len(rendered.text.encode()) == MAX_COMMAND_BYTES


def test_invalid_request_maps_to_validation_error_with_field_and_reason() -> None:
    failure = translate(InvalidRequest(target="web", field="argv[1]", reason="contains a NUL byte"))
    assert failure is not None
    assert failure.code == ErrorCode.VALIDATION_ERROR
    assert failure.retryable is False
    assert failure.details["field"] == "argv[1]"
    assert failure.details["reason"] == "contains a NUL byte"
    assert "argv[1]" in failure.message


def test_invalid_embedded_target_alias_is_an_invalid_request(short_tmp: Path) -> None:
    with pytest.raises(InvalidRequest) as info:
        EmbeddedTarget(short_tmp, alias="-oProxyCommand=x")
    assert info.value.field == "alias"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ro-inv-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def embedded_ops(short_tmp: Path) -> AsyncIterator[RemoteOps]:
    async with EmbeddedTarget(short_tmp / "w", alias="emb") as target:
        settings = TransportSettings(ssh_config_file=target.ssh_config_path, control_dir=short_tmp / "c")
        async with RemoteOps(settings, [TargetSpec(name="emb", host=target.alias)]) as ops:
            yield ops


@pytest.mark.anyio
@pytest.mark.parametrize(("argv", "cwd", "env", "field"), REFUSED, ids=IDS)
async def test_remote_ops_run_raises_invalid_request_and_the_next_call_still_works(
    embedded_ops: RemoteOps, argv: list[str], cwd: str | None, env: dict[str, str], field: str
) -> None:
    kwargs: dict[str, Any] = {"cwd": cwd, "env": env}
    with anyio.fail_after(_TIMEOUT):
        with pytest.raises(InvalidRequest) as info:
            await embedded_ops.run("emb", argv, **kwargs)
        result = await embedded_ops.run("emb", ["printf", "ok"])
    assert info.value.field == field
    assert (result.exit_code, result.stdout) == (0, "ok")
