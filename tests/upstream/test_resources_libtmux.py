"""libtmux-mcp's resource templates and prompts through `Upstream.surface`, over stdio and HTTP:
the lists, a read and a prompt are exactly what a direct client gets."""

from __future__ import annotations

import shutil
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fixtures import libtmux
from upstream import Upstream, UpstreamSettings

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

PROMPT_ARGS = {"command": "echo hi", "pane_id": "%0"}


def dump(items: Any) -> list[dict[str, Any]]:
    return [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items]


def wire(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return out


async def direct_view(direct: Any) -> dict[str, Any]:
    async with Client(direct, mode="legacy", cache=None) as client:
        return {
            "templates": dump((await client.list_resource_templates()).resource_templates),
            "resources": dump((await client.list_resources()).resources),
            "prompts": dump((await client.list_prompts()).prompts),
            "read": wire(await client.read_resource("tmux://sessions")),
            "prompt": wire(await client.get_prompt("run_and_wait", PROMPT_ARGS)),
        }


async def compare(settings: UpstreamSettings, direct: Any) -> None:
    with anyio.fail_after(120):  # two libtmux-mcp start-ups (~3 s each here, 6+ s on a loaded machine)
        expected = await direct_view(direct)
        async with Upstream(settings) as up:
            await up.list_tools()  # the first connect is made
            surface = up.surface
            got = {
                "templates": dump(await surface.list_resource_templates() or ()),
                "resources": dump(await surface.list_resources() or ()),
                "prompts": dump(await surface.list_prompts() or ()),
                "read": wire(await surface.read_resource("tmux://sessions")),
                "prompt": wire(await surface.get_prompt("run_and_wait", PROMPT_ARGS)),
            }
            supports = (surface.supports("resource_templates"), surface.supports("prompts"))
    assert len(expected["templates"]) == 6
    assert len(expected["prompts"]) == 4
    assert supports == (True, True)
    assert got == expected


async def test_libtmux_over_stdio_templates_prompts_a_read_and_a_prompt_are_identical() -> None:
    with libtmux.tmux_socket("surface", session="s1") as socket:
        env = libtmux.libtmux_env(socket)
        settings = UpstreamSettings(
            name="tmux",
            transport="stdio",
            command=libtmux.stdio_command(),
            env=env,
            connect_timeout_s=60,
            call_wait_s=60,
        )
        await compare(settings, libtmux.stdio_params(socket))


async def test_libtmux_over_http_templates_prompts_a_read_and_a_prompt_are_identical() -> None:
    with libtmux.tmux_socket("surface", session="s1") as socket:
        async with libtmux.libtmux_http(socket) as url:
            settings = UpstreamSettings(
                name="tmux", transport="http", url=url, connect_timeout_s=60, call_wait_s=60
            )
            await compare(settings, url)
