"""The MCP Inspector CLI (``@modelcontextprotocol/inspector@2.12.0``) reads libtmux-mcp's relayed resource
templates, prompts, a resource and a prompt through the real gateway process over bearer-authenticated HTTP,
in both protocol eras (handshake and 2026-07-28).

What it prints must equal what a direct Python client of libtmux-mcp gets (same tmux server).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fixtures import libtmux
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ensure_tool

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

CLIENT_TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


@pytest.fixture(scope="module")
def tmux_with_session() -> Iterator[str]:
    with libtmux.tmux_socket("gw-inspector", session="s1") as socket:
        yield socket


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, tmux_with_session: str) -> Iterator[GatewayProcess]:
    # The config writer has no inline tables: the environment travels through env(1) in the argv.
    variables = [f"{key}={value}" for key, value in libtmux.libtmux_env(tmux_with_session).items()]
    connection = {
        "name": "tmux",
        "transport": "stdio",
        "command": ["env", *variables, *libtmux.stdio_command()],
        "connect_timeout_s": 30,
        "first_list_wait_s": 30,
    }
    config = {"upstreams": [{"connection": connection}]}
    with run_gateway(tmp_path_factory.mktemp("gw-surface"), config) as gw:
        yield gw


def inspect(inspector: InstalledTool, gw: GatewayProcess, home: Path, *args: str) -> dict[str, Any]:
    argv = ["--cli", gw.url, "--transport", "http", *args, "--format", "json", "--stored-auth-only"]
    argv += ["--header", f"Authorization: Bearer {gw.token}"]  # variadic: keep it last
    run = inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=home)
    assert run.returncode == 0, f"{run.describe()}\n--- gateway stderr ---\n{gw.stderr_text()[-4000:]}"
    result = json.loads(run.stdout)["result"]
    assert isinstance(result, dict)
    return result


def direct(socket: str) -> dict[str, Any]:
    async def view() -> dict[str, Any]:
        with anyio.fail_after(45):
            async with Client(libtmux.stdio_params(socket), mode="legacy", cache=None) as client:
                templates = (await client.list_resource_templates()).resource_templates
                prompts = (await client.list_prompts()).prompts
                read = await client.read_resource("tmux://sessions")
                prompt = await client.get_prompt("run_and_wait", {"command": "true", "pane_id": "%0"})
        dump = {"by_alias": True, "exclude_none": True, "mode": "json"}
        return {
            "templates": [t.model_dump(**dump) for t in templates],
            "prompts": [p.model_dump(**dump) for p in prompts],
            "read": read.model_dump(**dump)["contents"],
            "prompt": prompt.model_dump(**dump)["messages"],
        }

    result: dict[str, Any] = anyio.run(view)
    return result


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_lists_reads_and_gets_the_relayed_templates_and_prompts(
    inspector: InstalledTool, gateway: GatewayProcess, tmux_with_session: str, tmp_path: Path, era: str
) -> None:
    templates = inspect(
        inspector, gateway, tmp_path, "--protocol-era", era, "--method", "resources/templates/list"
    )
    prompts = inspect(inspector, gateway, tmp_path, "--protocol-era", era, "--method", "prompts/list")
    read = inspect(
        inspector,
        gateway,
        tmp_path,
        "--protocol-era",
        era,
        "--method",
        "resources/read",
        "--uri",
        "tmux://sessions",
    )
    prompt = inspect(
        inspector,
        gateway,
        tmp_path,
        "--protocol-era",
        era,
        "--method",
        "prompts/get",
        "--prompt-name",
        "run_and_wait",
        "--prompt-args",
        "command=true",
        "pane_id=%0",
    )
    expected = direct(tmux_with_session)
    assert len(expected["templates"]) == 6
    assert templates["resourceTemplates"] == expected["templates"]
    assert prompts["prompts"] == expected["prompts"]
    assert read["contents"] == expected["read"]
    assert prompt["messages"] == expected["prompt"]
