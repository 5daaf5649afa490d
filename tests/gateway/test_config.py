"""Configuration is read in one place; unknown keys name the key and the source; secrets are masked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway._errors import ConfigError
from gateway.config import CONFIG_ENV, load_settings


def test_defaults_load_without_a_file() -> None:
    s = load_settings(None, {})
    assert s.server.host == "127.0.0.1"
    assert s.server.path == "/mcp"
    assert s.auth.mode == "bearer"
    assert s.tools.toolsets == ("inspect", "manage", "execute", "upstream")
    assert s.server.max_argument_bytes == 64 * 1024
    assert s.server.max_body_bytes == 256 * 1024


def test_an_unknown_key_in_the_file_names_the_key_and_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[server]\nprot = 9000\n")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, {})
    assert info.value.key == "server.prot"
    assert info.value.source == str(cfg)
    assert "unknown key" in str(info.value)


def test_environment_overrides_win_and_unknown_ones_name_the_variable(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[server]\nport = 9000\n")
    s = load_settings(
        cfg, {"REMOTEOPS_GATEWAY__SERVER__PORT": "9100", "REMOTEOPS_GATEWAY__LOG_LEVEL": "debug"}
    )
    assert s.server.port == 9100
    assert s.log_level == "debug"
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, {"REMOTEOPS_GATEWAY__SERVER__PROT": "1"})
    assert info.value.source == "$REMOTEOPS_GATEWAY__SERVER__PROT"


def test_the_config_file_can_come_from_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('log_level = "warning"\n')
    assert load_settings(None, {CONFIG_ENV: str(cfg)}).log_level == "warning"


def test_invalid_toml_and_missing_files_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError):
        load_settings(bad, {})
    with pytest.raises(ConfigError):
        load_settings(tmp_path / "missing.toml", {})


def test_settings_are_frozen() -> None:
    s = load_settings(None, {})
    with pytest.raises(ValueError, match="frozen"):
        s.server.port = 1  # type: ignore[misc]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.mark.slow  # runs the CLI as a subprocess
def test_config_check_prints_the_effective_configuration_with_secrets_masked(tmp_path: Path) -> None:
    secret = "upstream-Secret-Header-Value-42"
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        "[[upstreams]]\n[upstreams.connection]\n"
        'name = "term"\ntransport = "http"\nurl = "http://127.0.0.1:1/mcp"\n'
        f'headers = {{ Authorization = "Bearer {secret}" }}\n'
    )
    out = _cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    assert secret not in out.stdout + out.stderr
    data = json.loads(out.stdout)
    masked = data["upstreams"][0]["connection"]["headers"]["Authorization"]
    assert set(masked) == {"len", "sha256_prefix"}  # digested by the one Redactor
    assert data["server"]["port"] == 8765


@pytest.mark.slow  # runs the CLI as a subprocess
def test_config_check_fails_with_exit_2_and_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[tools]\ntoolset = ['inspect']\n")
    out = _cli("--config", str(cfg), "config", "check")
    assert out.returncode == 2
    assert "tools.toolset" in out.stderr
    assert str(cfg) in out.stderr


@pytest.mark.slow  # runs the CLI as a subprocess
def test_config_check_rejects_an_unknown_toolset(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[tools]\ntoolsets = ['inspect', 'exec']\n")
    out = _cli("--config", str(cfg), "config", "check")
    assert out.returncode == 2
    assert "exec" in out.stderr


def test_the_shipped_example_configuration_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "ops" / "gateway.example.toml"
    s = load_settings(example, {})
    assert [t.name for t in s.targets] == ["web1"]
    assert s.upstreams[0].connection.transport == "stdio"


def test_duplicate_target_or_upstream_names_are_config_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('[[targets]]\nname = "web"\nhost = "a"\n[[targets]]\nname = "web"\nhost = "b"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, {})
    assert info.value.key == "targets"
    assert "duplicate target name 'web'" in str(info.value)
