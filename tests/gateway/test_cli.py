"""The command line as an operator meets it: help, version, ``--config`` anywhere, ``config check``'s verdict
and warnings, startup failures as one line with exit status 2 (never a traceback), and quiet pipes."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway._catalog import build_catalog
from gateway._version import __version__
from gateway.cli import _parser, main

_TIMEOUT_S = 60

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m gateway ARGS`` as a process (smoke tests: the entry point, a real pipe, a real bind)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("REMOTEOPS_GATEWAY")}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
        env=base,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The command line in-process: ``main(argv)`` with its stdout and stderr captured, the exit status of
    ``main`` or of argparse's ``SystemExit``, and no ``REMOTEOPS_GATEWAY*`` variable of the caller's."""
    for key in [k for k in os.environ if k.startswith("REMOTEOPS_GATEWAY")]:
        monkeypatch.delenv(key)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()  # what an earlier call printed is not this call's
        code: int | str | None
        try:
            code = main(list(args))
        except SystemExit as exc:  # --help, and argparse refusing an argument
            code = exc.code
        with contextlib.suppress(ValueError, OSError):
            sys.stdout.flush()
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["remoteops-gateway", *args], int(code or 0), out.out, out.err)

    return run


def _one_line_failure(out: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, exactly one line on stderr, no traceback (in-process: ``main`` returned instead of raising);
    the line contains every needle."""
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_version_prints_the_package_version() -> None:
    out = _cli_process("--version")  # a smoke test of the entry point itself
    assert out.returncode == 0
    assert out.stdout.strip() == f"remoteops-gateway {__version__}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse has no public walk over subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return found


def test_every_option_of_every_subcommand_has_help_text() -> None:
    subs = _subparsers(_parser())
    assert {"serve", "demo", "config", "config check", "tools"} <= set(subs)
    for name, sub in subs.items():
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction) or not action.option_strings:
                continue
            assert action.help, (name, action.option_strings)
            assert action.help != argparse.SUPPRESS, (name, action.option_strings)


@pytest.mark.parametrize("argv", [(), ("serve",), ("demo",), ("config",), ("config", "check"), ("tools",)])
def test_help_has_no_rest_markup_and_the_main_commands_show_examples(cli: Cli, argv: tuple[str, ...]) -> None:
    out = cli(*argv, "--help")
    assert out.returncode == 0, out.stderr
    for markup in ("``", ":class:", ":func:", ":data:", ".. "):
        assert markup not in out.stdout, (markup, out.stdout)
    if argv in ((), ("serve",), ("demo",)):
        assert "examples:" in out.stdout


def test_config_is_accepted_after_the_subcommand_too(cli: Cli, tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[server]\nport = 9123\n")
    before = cli("--config", str(cfg), "config", "check")
    after = cli("config", "check", "--config", str(cfg))
    middle = cli("config", "--config", str(cfg), "check")
    for out in (before, after, middle):
        assert out.returncode == 0, out.stderr
        assert '"port": 9123' in out.stdout


def test_config_check_ends_with_a_one_line_verdict(cli: Cli, tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('[[targets]]\nname = "web1"\nhost = "web1"\n')
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("remoteops-gateway: configuration OK: 1 target(s), 0 upstream(s)"), last


def test_config_check_warns_about_a_stdio_upstream_command_missing_on_path(cli: Cli, tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        "[[upstreams]]\n[upstreams.connection]\n"
        'name = "term"\ntransport = "stdio"\ncommand = ["rog-no-such-program-xyz", "--stdio"]\n'
        "[[upstreams]]\n[upstreams.connection]\n"
        f'name = "fine"\ntransport = "stdio"\ncommand = ["{sys.executable}", "-V"]\n'
    )
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, out.stderr
    assert "'term'" in warnings[0]
    assert "rog-no-such-program-xyz" in warnings[0]
    assert "1 warning(s)" in out.stderr.strip().splitlines()[-1]


def test_config_check_masks_secrets_with_the_redactors_rules(cli: Cli, tmp_path: Path) -> None:
    secret = "X-Api-Key-Value-Not-For-Eyes-42"
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        "[[upstreams]]\n[upstreams.connection]\n"
        'name = "term"\ntransport = "http"\nurl = "http://127.0.0.1:1/mcp"\n'
        f'headers = {{ X-Api-Key = "{secret}" }}\n'
        f'bearer_token_file = "{tmp_path / "up-token"}"\n'
    )
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    assert secret not in out.stdout + out.stderr
    assert '"sha256_prefix"' in out.stdout  # digested by the one Redactor, as audit records are
    assert str(tmp_path / "up-token") in out.stdout  # a path is no secret: it stays readable


def test_an_upstream_token_file_that_is_not_utf8_does_not_crash_config_check(
    cli: Cli, tmp_path: Path
) -> None:
    token = _private_token_file(tmp_path / "up-token", b"\xff\xfe\xfd")
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        "[[upstreams]]\n[upstreams.connection]\n"
        f'name = "term"\ntransport = "http"\nurl = "http://127.0.0.1:1/mcp"\nbearer_token_file = "{token}"\n'
    )
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_config_check_rejects_a_state_dir_that_is_a_file_as_serve_does(tmp_path: Path, cli: Cli) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('state_dir = "/etc/passwd"\n')
    for argv in (("config", "check"), ("serve", "--stdio")):
        out = cli("--config", str(cfg), *argv)
        _one_line_failure(out, "/etc/passwd", "state_dir")


def test_config_check_rejects_a_local_root_that_does_not_exist_as_serve_does(
    tmp_path: Path, cli: Cli
) -> None:
    cfg = tmp_path / "g.toml"
    missing = tmp_path / "no-such-root"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\n[transfers]\nlocal_roots = ["{missing}"]\n')
    for argv in (("config", "check"), ("serve", "--stdio")):
        out = cli("--config", str(cfg), *argv)
        _one_line_failure(out, str(missing), "transfers.local_roots.0")


def test_config_check_of_a_directory_is_one_line_and_exit_2(tmp_path: Path, cli: Cli) -> None:
    out = cli("--config", str(tmp_path), "config", "check")
    _one_line_failure(out, str(tmp_path), "directory")


def test_config_check_of_a_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path: Path, cli: Cli) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_bytes(b'state_dir = "\xff\xfe"\n')
    out = cli("--config", str(cfg), "config", "check")
    _one_line_failure(out, str(cfg), "UTF-8")


def test_config_check_shows_every_error_and_names_an_unknown_key(tmp_path: Path, cli: Cli) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('[[targets]]\nname = "web1"\nhots = "web1"\n[server]\nport = -1\n')
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 3, out.stderr  # host missing, hots unknown, port out of range: all three
    assert any("unknown key" in line and "'targets.0.hots'" in line for line in lines), lines
    assert any("'targets.0.host'" in line for line in lines), lines
    assert any("'server.port'" in line for line in lines), lines


def test_config_check_counts_the_transfer_tools_when_local_roots_are_set(tmp_path: Path, cli: Cli) -> None:
    from gateway.config import Settings
    from gateway.tools import all_specs

    root = tmp_path / "local"
    root.mkdir()
    cfg = tmp_path / "g.toml"
    cfg.write_text(f'[transfers]\nlocal_roots = ["{root}"]\n')
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    settings = Settings.model_validate({"transfers": {"local_roots": [str(root)]}})
    expected = len(build_catalog(all_specs(), **settings.tools.model_dump(), settings=settings).enabled)
    assert "remote_upload" in build_catalog(all_specs(), toolsets=["execute"], settings=settings).enabled
    assert f"{expected} own tool(s) enabled" in out.stderr.strip().splitlines()[-1]


def test_config_check_shows_values_that_are_not_secrets_and_digests_those_that_are(
    tmp_path: Path, cli: Cli
) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        "[root]\naskpass_command = []\n"
        "[[upstreams]]\n[upstreams.connection]\n"
        'name = "tmux"\ntransport = "stdio"\ncommand = ["libtmux-mcp"]\n'
        'env = { LIBTMUX_SOCKET = "agents", GITHUB_TOKEN = "ghp-not-for-eyes-123" }\n'
    )
    out = cli("--config", str(cfg), "config", "check")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["root"]["askpass_command"] == []
    env = shown["upstreams"][0]["connection"]["env"]
    assert env["LIBTMUX_SOCKET"] == "agents"
    assert set(env["GITHUB_TOKEN"]) >= {"len", "sha256_prefix"}
    assert "ghp-not-for-eyes-123" not in out.stdout + out.stderr


def test_the_xdg_config_file_is_read_when_no_config_is_given(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "xdg" / "remoteops-gateway"
    where.mkdir(parents=True)
    (where / "gateway.toml").write_text("[server]\nport = 9124\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    out = cli("config", "check")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["server"]["port"] == 9124
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    elsewhere = cli("config", "check")
    assert json.loads(elsewhere.stdout)["server"]["port"] == 8765  # no file there: the defaults


def test_the_readme_names_the_default_toolsets_of_the_code() -> None:
    from gateway.config import ToolSettings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    where = readme[readme.index("**Where things run.**") :]
    named = where[where.index("`tools.toolsets`, default ") :].split(";")[0]
    assert [t for t in ToolSettings().toolsets if t not in named] == []


def test_config_check_piped_into_head_stops_without_a_traceback(tmp_path: Path) -> None:
    # Far more output than a pipe buffer holds, so the writer meets the closed pipe for sure.
    cfg = tmp_path / "g.toml"
    cfg.write_text("".join(f'[[targets]]\nname = "t{i}"\nhost = "h{i}"\n' for i in range(4000)))
    err_path = tmp_path / "stderr"
    script = f'"{sys.executable}" -m gateway --config "{cfg}" config check 2>"{err_path}" | head -n 1'
    out = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )
    assert out.stdout == "{\n"
    stderr = err_path.read_text()
    assert "Traceback" not in stderr, stderr
    assert "BrokenPipe" not in stderr, stderr


# --- startup failures: one line naming the path or address, exit 2 ------------------------------------


def _http_config(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "g.toml"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\n{extra}')
    return cfg


def _private_token_file(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(0o600)
    return path


def test_a_token_file_that_is_not_utf8_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    token = _private_token_file(tmp_path / "state" / "token", b"\xff\xfe" + b"a" * 40 + b"\n")
    out = cli("--config", str(_http_config(tmp_path)), "serve", "--http", "--port", "0")
    _one_line_failure(out, str(token), "UTF-8")


def test_a_directory_at_the_token_path_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    token = tmp_path / "state" / "token"
    token.mkdir(parents=True)
    out = cli("--config", str(_http_config(tmp_path)), "serve", "--http", "--port", "0")
    _one_line_failure(out, str(token), "directory")


def test_a_state_dir_that_is_a_file_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory\n")
    for mode in ("--http", "--stdio"):
        out = cli("--config", str(_http_config(tmp_path)), "serve", mode, "--port", "0")
        _one_line_failure(out, str(tmp_path / "state"), "state_dir")


@pytest.mark.parametrize("bad", ["\x1b[2J", "\x00", "\x7f", "\u0085"])
def test_a_token_holding_control_characters_is_refused(cli: Cli, tmp_path: Path, bad: str) -> None:
    token = _private_token_file(tmp_path / "state" / "token", f"abcdefgh{bad}ijklmnopqrstuvwx\n".encode())
    out = cli("--config", str(_http_config(tmp_path)), "serve", "--http", "--port", "0")
    line = _one_line_failure(out, str(token), "control characters")
    assert bad not in line


def test_a_port_already_in_use_is_one_line_naming_host_and_port(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # a process (the bind is real, and serve configures the process's logging before it)
        out = _cli_process("--config", str(_http_config(tmp_path)), "serve", "--http", "--port", str(port))
    _one_line_failure(out, f"127.0.0.1:{port}", "already in use")


def test_the_acceptance_suite_is_no_subcommand_of_the_product(cli: Cli) -> None:
    # The suite is `python -m acceptance` of a source checkout; the installed command never reaches it.
    out = cli("acceptance", "--quick")
    assert out.returncode == 2
    assert "acceptance" not in _subparsers(_parser())


def test_an_unknown_argument_of_another_subcommand_is_still_refused(cli: Cli) -> None:
    out = cli("tools", "--quick")
    assert out.returncode == 2
    assert "unrecognized arguments: --quick" in out.stderr
