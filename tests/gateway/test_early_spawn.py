"""The entry point starts what must start first: a stdio upstream is spawned from the configuration file
before the gateway's own imports (so both start-ups overlap) and handed to the relay, whose first
``tools/list`` holds its tools; what cannot be handed over is ended, and what the early reader cannot
read is left to the normal path. Serving keeps out the optional imports it never uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from gateway._early import EarlyUpstreams, spawn_early
from gateway._launch import KEPT_OUT
from gateway.config import load_settings
from gateway.relay.tools import Relay
from tests.fixtures.gateway_proc import write_config
from tests.upstream.conftest import FAST_BACKOFF, STDIO_START, fault_command

# Started as the upstream (a shell: it looks within milliseconds): notes whether its parent, the gateway,
# had mapped pydantic's compiled core yet (the heavy imports load it early), then becomes the fault upstream.
RECORDER = """#!/bin/sh
if grep -q pydantic_core "/proc/$PPID/maps"; then late=true; else late=false; fi
echo "{\\"pid\\": $$, \\"parent_had_pydantic\\": $late}" >> "$1"
shift
exec "$@"
"""


def upstream_config(tmp_path: Path, command: list[str], **connection: object) -> Path:
    return write_config(
        tmp_path / "g.toml",
        {
            "state_dir": str(tmp_path / "state"),
            "upstreams": [
                {
                    "connection": {
                        "name": "early",
                        "transport": "stdio",
                        "command": command,
                        **FAST_BACKOFF,
                        **STDIO_START,
                        **connection,
                    }
                }
            ],
        },
    )


def reaped(early: EarlyUpstreams) -> bool:
    return all(p.process.returncode is not None for p in early.processes.values())


@pytest.mark.slow  # spawns the gateway over stdio, and a fault upstream
@pytest.mark.anyio
async def test_a_stdio_upstream_is_spawned_before_the_gateways_imports_and_its_tools_are_in_the_first_list(
    tmp_path: Path,
) -> None:
    record = tmp_path / "spawns.jsonl"
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER, encoding="utf-8")
    recorder.chmod(0o755)
    (tmp_path / "fault").mkdir()
    fault = fault_command("--state-dir", str(tmp_path / "fault"), "--stdio")
    cfg = upstream_config(tmp_path, [str(recorder), str(record), *fault])
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "--config", str(cfg), "serve", "--stdio"]
    )
    async with Client(params, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("echo", {"text": "overlapped"})
    assert {"gateway_health", "echo"} <= names  # the first list already holds the relayed tools
    assert result.structured_content == {"text": "overlapped"}
    spawns = [json.loads(line) for line in record.read_text().splitlines()]
    assert spawns == [{"pid": spawns[0]["pid"], "parent_had_pydantic": False}]  # once, and early


@pytest.mark.slow  # spawns a process
def test_the_early_processes_have_their_own_session_and_are_ended_and_reaped_when_nobody_takes_them(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    cfg = upstream_config(tmp_path, command, env={"MARK": "1"})
    early = spawn_early(["--config", str(cfg), "serve", "--stdio"], {"PATH": "/usr/bin:/bin"})
    try:
        [proc] = early.processes.values()
        assert proc.argv == tuple(command)
        assert proc.env == {"PATH": "/usr/bin:/bin", "MARK": "1"}
        assert os.getsid(proc.process.pid) == proc.process.pid
    finally:
        early.close()
    assert reaped(early)


@pytest.mark.slow  # spawns a process
@pytest.mark.anyio
async def test_an_early_process_the_loaded_settings_would_not_spawn_is_ended_when_the_relay_is_built(
    tmp_path: Path,
) -> None:
    cfg = upstream_config(tmp_path, [sys.executable, "-c", "import sys; sys.stdin.read()"])
    early = spawn_early(["--config", str(cfg)], {"PATH": "/usr/bin:/bin"})  # PATH differs from ours
    settings = load_settings(cfg)
    try:
        Relay(settings.upstreams, own_names=frozenset(), enabled=True, early=early)
        [proc] = early.processes.values()
        assert proc.claimed
        assert proc.process.returncode is not None  # ended at once, not at exit
    finally:
        early.close()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "environ"),
    [
        ('[[upstreams]]\n[upstreams.connection]\nname = "x"\ntransport = "stdio"\ncommand = [', {}),
        ('[[upstreams]]\n[upstreams.connection]\nname = "x"\ntransport = "http"\nurl = "http://a/"\n', {}),
        ('[[upstreams]]\n[upstreams.connection]\nname = "x"\ntransport = "stdio"\ncommand = []\n', {}),
        (
            '[tools]\ntoolsets = ["inspect"]\n[[upstreams]]\n[upstreams.connection]\nname = "x"\n'
            'transport = "stdio"\ncommand = ["true"]\n',
            {},
        ),
        (
            '[[upstreams]]\n[upstreams.connection]\nname = "x"\ntransport = "stdio"\ncommand = ["true"]\n',
            {"REMOTEOPS_GATEWAY__UPSTREAMS": "[]"},
        ),
    ],
    ids=["bad-toml", "http", "no-command", "upstream-toolset-off", "env-override"],
)
def test_nothing_is_spawned_early_that_the_normal_path_should_decide(
    tmp_path: Path, text: str, environ: dict[str, str]
) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(text, encoding="utf-8")
    early = spawn_early(["--config", str(cfg), "serve", "--stdio"], environ)
    assert early.processes == {}


@pytest.mark.unit
def test_a_missing_configuration_file_spawns_nothing_and_leaves_the_error_to_the_loader(
    tmp_path: Path,
) -> None:
    assert spawn_early(["--config", str(tmp_path / "absent.toml")], {}).processes == {}


@pytest.mark.slow  # an interpreter start-up
def test_serving_keeps_out_the_optional_imports_it_never_uses() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        from gateway._launch import keep_out_unused
        keep_out_unused()
        import gateway.cli, gateway.serving.serve, gateway._runtime, gateway.tools, structlog.dev, uvicorn
        print(json.dumps(sorted(n for n, m in sys.modules.items() if m is not None)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert loaded & set(KEPT_OUT) == set()
    assert "gateway.serving.serve" in json.loads(done.stdout)


@pytest.mark.slow  # an interpreter start-up
def test_the_entry_point_imports_only_the_standard_library() -> None:
    code = "import json, sys; import gateway; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    tops = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert tops - set(sys.stdlib_module_names) - {"gateway", "__main__", "_distutils_hack"} == set()
