"""The README's client snippets, run with the real clients against the real gateway.

Each command is taken from the README's ``clients:claude`` / ``clients:inspector`` blocks and run by ``bash``
as written, with only what a test must change: the placeholder configuration path
``/home/me/…/gateway.toml`` becomes this test's file, the port ``8765`` the gateway's free port, and
``npx -y @modelcontextprotocol/inspector@2.12.0`` the Inspector installed (at that exact version) under
``.cache/``. Each run gets its own ``HOME`` (Claude Code keeps its MCP configuration in
``$HOME/.claude.json``), holding the HTTP gateway's token file at the README's default place, so the README's
``$(cat ~/.local/state/remoteops-gateway/token)`` reads the real token.

* Claude Code's CLI (``@anthropic-ai/claude-code@2.1.332``, its native linux-x64 binary): ``claude mcp add``
  exactly as the README writes it, then ``claude mcp list`` must report the server ``Connected`` — over stdio
  and over HTTP with the bearer header; with a wrong token in the token file it reports the gateway's 401.
  ``mcp add``/``mcp list`` need no login (telemetry and other non-essential traffic are switched off).
* The MCP Inspector CLI lists the tools over stdio (``--`` before the server's command, so that its own
  ``--config`` option does not take the gateway's) and over HTTP. The test gives it a longer connect timeout
  (``--connect-timeout``) than its 15 s default: a stdio gateway on a loaded 2-core CI machine took longer to
  answer ``initialize`` once.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.harness import starts
from acceptance.harness.node_tools import (
    CLAUDE_CODE,
    INSPECTOR,
    InstalledTool,
    ToolRun,
    _run_bounded,
    ensure_tool,
)
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIG_PLACEHOLDER = "/home/me/.config/remoteops-gateway/gateway.toml"
NPX_INSPECTOR = "npx -y @modelcontextprotocol/inspector@2.12.0"
CLIENT_TIMEOUT_S = 180.0
CONNECT_TIMEOUT_MS = "120000"
VENV_BIN = Path(sys.executable).parent  # where `remoteops-gateway` is installed


def _commands(block: str) -> list[str]:
    match = re.search(rf"<!-- {block}:start -->\n```sh\n(.*?)\n```\n<!-- {block}:end -->", README, re.DOTALL)
    assert match, f"README has no {block} block"
    return [line for line in match.group(1).splitlines() if line and not line.startswith("#")]


CLAUDE_STDIO, CLAUDE_HTTP = _commands("clients:claude")
INSPECTOR_STDIO, INSPECTOR_HTTP = _commands("clients:inspector")


@pytest.fixture(scope="session")
def claude() -> InstalledTool:
    return ensure_tool(CLAUDE_CODE)


@pytest.fixture(scope="session")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


def _home(tmp_path: Path, name: str, tool: InstalledTool) -> Path:
    """An isolated HOME whose bin/ holds the client's executable as the README calls it."""
    home = tmp_path / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / tool.tool.executable).symlink_to(tool.executable)
    return home


@starts("node")
def _shell(tool: InstalledTool, home: Path, command: str) -> ToolRun:
    """Run one README command line with bash, in ``home``, with the client and the gateway on PATH."""
    extra = {
        "PATH": f"{home / 'bin'}:{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "MCP_TIMEOUT": CONNECT_TIMEOUT_MS,  # Claude Code's wait for a server to connect
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env = {k: v for k, v in tool.env(home=home, extra=extra).items() if not k.startswith("REMOTEOPS_GATEWAY")}
    return _run_bounded(["bash", "-c", command], timeout_s=CLIENT_TIMEOUT_S, env=env, cwd=home)


def _stdio_config(home: Path) -> Path:
    config = home / "gateway.toml"
    config.write_text(f'state_dir = "{home / "stdio-state"}"\n', encoding="utf-8")
    return config


@pytest.fixture(scope="module")
def http_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readme-http-home")


@pytest.fixture(scope="module")
def http_gateway(tmp_path_factory: pytest.TempPathFactory, http_home: Path) -> Iterator[GatewayProcess]:
    # The README's default state directory under the HOME the clients run with: the token is where it says.
    state = http_home / ".local" / "state" / "remoteops-gateway"
    with run_gateway(tmp_path_factory.mktemp("readme-gw"), {"state_dir": str(state)}) as gw:
        assert gw.token
        assert (state / "token").read_text(encoding="utf-8").strip() == gw.token
        yield gw


def _at_port(command: str, gw: GatewayProcess) -> str:
    assert "http://127.0.0.1:8765/mcp" in command
    return command.replace("http://127.0.0.1:8765/mcp", gw.url)


def _home_with_token_of(http_home: Path, home: Path, token: str | None = None) -> None:
    """Give ``home`` the HTTP gateway's token file (or a wrong token) at the README's path."""
    state = home / ".local" / "state" / "remoteops-gateway"
    state.mkdir(parents=True)
    real = (http_home / ".local" / "state" / "remoteops-gateway" / "token").read_text(encoding="utf-8")
    (state / "token").write_text(token if token is not None else real, encoding="utf-8")


def _mcp_list_line(claude: InstalledTool, home: Path) -> str:
    run = _shell(claude, home, "claude mcp list")
    assert run.returncode == 0, run.describe()
    lines = [line for line in run.stdout.splitlines() if line.startswith("remoteops:")]
    assert len(lines) == 1, run.describe()
    return lines[0]


def _added(run: ToolRun) -> None:
    assert run.returncode == 0, run.describe()
    assert "remoteops" in run.stdout, run.describe()


def test_claude_code_added_over_stdio_as_the_readme_writes_it_reports_connected(
    claude: InstalledTool, tmp_path: Path
) -> None:
    home = _home(tmp_path, "home", claude)
    assert CLAUDE_STDIO.startswith("claude mcp add remoteops -- remoteops-gateway serve --stdio")
    _added(_shell(claude, home, CLAUDE_STDIO.replace(CONFIG_PLACEHOLDER, str(_stdio_config(home)))))
    line = _mcp_list_line(claude, home)
    assert "Connected" in line, line
    assert "serve --stdio" in line, line


def test_claude_code_added_over_http_with_the_readme_bearer_header_reports_connected(
    claude: InstalledTool, http_gateway: GatewayProcess, http_home: Path, tmp_path: Path
) -> None:
    home = _home(tmp_path, "home", claude)
    _home_with_token_of(http_home, home)
    _added(_shell(claude, home, _at_port(CLAUDE_HTTP, http_gateway)))
    stored = json.loads((home / ".claude.json").read_text(encoding="utf-8"))
    servers = [p["mcpServers"]["remoteops"] for p in stored["projects"].values() if "mcpServers" in p]
    bearer = {"Authorization": f"Bearer {http_gateway.token}"}
    assert servers == [{"type": "http", "url": http_gateway.url, "headers": bearer}]
    line = _mcp_list_line(claude, home)
    assert "Connected" in line, line
    assert "(HTTP)" in line, line


def test_claude_code_with_a_wrong_token_in_the_token_file_reports_the_gateway_401(
    claude: InstalledTool, http_gateway: GatewayProcess, http_home: Path, tmp_path: Path
) -> None:
    home = _home(tmp_path, "home", claude)
    _home_with_token_of(http_home, home, token="not-the-gateway-token-0123456789")
    _added(_shell(claude, home, _at_port(CLAUDE_HTTP, http_gateway)))
    line = _mcp_list_line(claude, home)
    assert "Connected" not in line, line
    assert "Failed to connect" in line, line
    assert "401" in line, line
    assert "invalid_token" in line, line  # the gateway's own answer, passed on by Claude Code


def _inspector_command(command: str) -> str:
    assert command.startswith(f"{NPX_INSPECTOR} --cli ")
    assert INSPECTOR.packages == ("@modelcontextprotocol/inspector@2.12.0",)  # the README's pin
    return command.replace(
        f"{NPX_INSPECTOR} --cli ", f"mcp-inspector --cli --connect-timeout {CONNECT_TIMEOUT_MS} ", 1
    )


def _tool_names(run: ToolRun) -> set[str]:
    assert run.returncode == 0, run.describe()
    return {tool["name"] for tool in json.loads(run.stdout)["tools"]}


def test_the_inspector_lists_the_tools_over_stdio_as_the_readme_runs_it(
    inspector: InstalledTool, tmp_path: Path
) -> None:
    home = _home(tmp_path, "home", inspector)
    command = _inspector_command(INSPECTOR_STDIO).replace(CONFIG_PLACEHOLDER, str(_stdio_config(home)))
    assert " -- remoteops-gateway serve --stdio --config " in command
    assert {"gateway_health", "target_list", "remote_exec"} <= _tool_names(_shell(inspector, home, command))


def test_the_inspector_lists_the_tools_over_http_with_the_readme_bearer_header(
    inspector: InstalledTool, http_gateway: GatewayProcess, http_home: Path, tmp_path: Path
) -> None:
    home = _home(tmp_path, "home", inspector)
    _home_with_token_of(http_home, home)
    command = _inspector_command(_at_port(INSPECTOR_HTTP, http_gateway))
    assert {"gateway_health", "target_list", "remote_exec"} <= _tool_names(_shell(inspector, home, command))
