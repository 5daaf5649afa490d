"""The MCP Inspector CLI (the official TypeScript client, which validates ``structuredContent`` against each
tool's ``outputSchema``, on error results too) drives the systemd tools and ``admin_transaction`` against the
real gateway whose target is a real systemd 252 (acceptance/harness/systemd_helpers.py, login user ``plain``
with a NOPASSWD sudo rule; ``sd`` is in ``root.targets``, ``other`` — the same host — is not): each failure
reaches the client as its structured error code, each success and each transaction outcome (rolled back,
committed as root, ambiguous after a lost transport) as a result the client accepts.
Skipped, with the reason, where the machine cannot boot a systemd target."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptance.harness.systemd_helpers import SystemdHost, booted, unavailable_reason
from tests.fixtures.gateway_proc import GatewayProcess, run_gateway
from tests.fixtures.node_tools import INSPECTOR, InstalledTool, ensure_tool
from tests.gateway.test_clients_tools import _call, _fail

pytestmark = [pytest.mark.slow]

HOSTILE = ["-rf.service", "$(id).service", "x\\y.service"]  # all 10 kinds: tests/remoteops/test_systemd.py
ROOT_CONF = "/etc/rog-insp-root.conf"


@pytest.fixture(scope="module")
def inspector() -> InstalledTool:
    return ensure_tool(INSPECTOR)


@pytest.fixture(scope="module")
def host() -> Iterator[SystemdHost]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot boot a systemd target here: {reason}")
    with booted() as booted_host:
        yield booted_host


@pytest.fixture(scope="module")
def gateway(host: SystemdHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "transport": {
            "ssh_config_file": str(host.settings.ssh_config_file),
            "control_dir": str(host.settings.control_dir),
        },
        "targets": [{"name": "sd", "host": "rogsd"}, {"name": "other", "host": "rogsd"}],
        "root": {"targets": ["sd"], "providers": ["sudo_nopasswd"]},
        "tools": {"toolsets": ["inspect", "execute"]},
    }
    with run_gateway(tmp_path_factory.mktemp("gw-insp-sd"), config) as gw:
        yield gw


def _web_conf(host: SystemdHost) -> Path:
    return host.target.root / "etc/rog/web.conf"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("systemd_unit_status", lambda bad: {"units": [bad]}),
        ("systemd_unit_action", lambda bad: {"unit": bad, "action": "start"}),
        ("systemd_unit_dependencies", lambda bad: {"unit": bad}),
        ("systemd_daemon_reload", lambda bad: {"unit": bad}),
        ("journal_read", lambda bad: {"unit": bad}),
        ("service_restart", lambda bad: {"service": bad.removesuffix(".service")}),
        (
            "admin_transaction",
            lambda bad: {
                "change": {"kind": "unit_action", "unit": bad, "action": "restart"},
                "gates": [{"kind": "unit_active", "unit": "rog-web.service"}],
            },
        ),
    ],
)
def test_a_hostile_unit_name_reaches_the_inspector_as_validation_error_and_starts_nothing(
    inspector: InstalledTool, gateway: GatewayProcess, host: SystemdHost, tmp_path: Path, tool: str, args: Any
) -> None:
    _call(inspector, gateway, tmp_path, "service_status", target="sd", service="rog-web")  # connected
    before = host.processes()
    for bad in HOSTILE:
        assert _fail(inspector, gateway, tmp_path, tool, target="sd", **args(bad)) == "validation_error", bad
    assert host.processes() == before


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("service_status", {"service": "rog-nothing"}),
        ("systemd_unit_status", {"units": ["rog-nothing.service"]}),
        ("systemd_unit_dependencies", {"unit": "rog-nothing.service"}),
        ("systemd_unit_action", {"unit": "rog-nothing.service", "action": "start"}),
        ("service_stop", {"service": "rog-nothing"}),
    ],
)
def test_a_unit_that_does_not_exist_reaches_the_inspector_as_not_found(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    assert _fail(inspector, gateway, tmp_path, tool, target="sd", **args) == "not_found"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("systemd_unit_action", {"unit": "rog-sleep.service", "action": "start"}),
        ("service_restart", {"service": "rog-sleep"}),
        ("systemd_daemon_reload", {}),
        ("journal_read", {"unit": "rog-log.service"}),
        (
            "admin_transaction",
            {
                "change": {"kind": "unit_action", "unit": "rog-sleep.service", "action": "start"},
                "gates": [{"kind": "unit_active", "unit": "rog-sleep.service"}],
            },
        ),
    ],
)
def test_privilege_root_outside_root_targets_reaches_the_inspector_as_policy_denied(
    inspector: InstalledTool, gateway: GatewayProcess, host: SystemdHost, tmp_path: Path, tool: str, args: Any
) -> None:
    assert (
        _fail(inspector, gateway, tmp_path, tool, target="other", privilege="root", **args) == "policy_denied"
    )
    assert host.target.show("rog-sleep.service", "ActiveState")["ActiveState"] == "inactive"


def test_the_inspector_accepts_the_systemd_reads_and_a_unit_round_trip(
    inspector: InstalledTool, gateway: GatewayProcess, tmp_path: Path
) -> None:
    status = _call(inspector, gateway, tmp_path, "service_status", target="sd", service="rog-web")
    [web] = status["units"]
    assert (web["unit"], web["active_state"], web["load_state"]) == ("rog-web.service", "active", "loaded")
    assert web["main_pid"] > 0
    listed = _call(inspector, gateway, tmp_path, "systemd_unit_list", target="sd", pattern="rog-*", all=True)
    assert "rog-web.service" in {u["unit"] for u in listed["units"]}
    deps = _call(
        inspector, gateway, tmp_path, "systemd_unit_dependencies", target="sd", unit="rog-web.service"
    )
    assert deps["unit"] == "rog-web.service"
    started = _call(inspector, gateway, tmp_path, "service_start", target="sd", service="rog-sleep")
    assert (started["before"]["active_state"], started["after"]["active_state"]) == ("inactive", "active")
    assert started["privilege"]["escalated_after_denial"] is True
    stopped = _call(inspector, gateway, tmp_path, "service_stop", target="sd", service="rog-sleep")
    assert stopped["after"]["active_state"] == "inactive"
    page = _call(inspector, gateway, tmp_path, "journal_read", target="sd", unit="rog-sleep.service", lines=5)
    assert page["cursor"]


def test_an_admin_transaction_whose_gate_fails_is_rolled_back_and_the_inspector_accepts_the_result(
    inspector: InstalledTool, gateway: GatewayProcess, host: SystemdHost, tmp_path: Path
) -> None:
    before = hashlib.sha256(_web_conf(host).read_bytes()).hexdigest()
    out = _call(
        inspector, gateway, tmp_path, "admin_transaction", target="sd", settle_s=2,
        change={"kind": "file", "path": "/etc/rog/web.conf", "content": "broken\n",
                "then": {"unit": "rog-web.service", "action": "restart"}},
        gates=[{"kind": "unit_active", "unit": "rog-web.service"},
               {"kind": "http_status", "url": "http://127.0.0.1:8080/web.conf", "status": 200}],
    )  # fmt: skip
    assert out["outcome"] == "rolled_back", out["steps"]
    assert [s["name"] for s in out["steps"]] == [
        "snapshot", "write", "unit_action", "gates", "restore_file", "restore_unit", "verify"
    ]  # fmt: skip
    assert hashlib.sha256(_web_conf(host).read_bytes()).hexdigest() == before == out["file_sha256_before"]
    assert host.target.show("rog-web.service", "ActiveState")["ActiveState"] == "active"


@pytest.fixture
def root_conf(host: SystemdHost) -> Iterator[Path]:
    path = host.target.root / ROOT_CONF.lstrip("/")
    path.write_bytes(b"ok v1\n")
    os.chown(path, 0, 0)
    path.chmod(0o644)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def test_an_admin_transaction_replaces_a_root_owned_file_through_the_root_provider(
    inspector: InstalledTool, gateway: GatewayProcess, root_conf: Path, tmp_path: Path
) -> None:
    gate = {"kind": "command", "argv": ["grep", "-q", "^ok v2", ROOT_CONF]}
    change = {"kind": "file", "path": ROOT_CONF, "content": "ok v2\n"}
    out = _call(inspector, gateway, tmp_path, "admin_transaction", target="sd", change=change, gates=[gate])
    assert out["outcome"] == "committed", out["steps"]
    write = next(s for s in out["steps"] if s["name"] == "write")
    assert write["data"]["privilege"]["ran_as"] == "root"
    assert root_conf.read_bytes() == b"ok v2\n"
    assert root_conf.stat().st_uid == 0
    audit = (gateway.state_dir / "audit.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in audit if '"admin_transaction"' in line]
    facts = records[-1]["facts"]["transaction"]
    assert facts["outcome"] == "committed"
    assert facts["privilege"]["write"]["provider"] == "sudo_nopasswd"  # the audit names who wrote the file
    user = _call(
        inspector, gateway, tmp_path, "admin_transaction", target="sd", change=change, gates=[gate],
        privilege="user",
    )  # fmt: skip
    assert user["outcome"] == "change_failed"
    assert [(s["name"], s["status"]) for s in user["steps"]] == [("snapshot", "done"), ("write", "failed")]


def _parent(host: SystemdHost, pid: int) -> tuple[int, str]:
    """The parent of the target process ``pid`` and the parent's command line."""
    stat = host.target.run("cat", f"/proc/{pid}/stat").stdout
    parent = int(stat.rsplit(")", 1)[1].split()[1])
    return parent, host.target.run("cat", f"/proc/{parent}/cmdline").stdout


def _ancestor_agent(host: SystemdHost, pid: int) -> int:
    """The agent that runs the target process ``pid``: above it, the call's supervisor (forked from the
    agent, so the same python3 command line), then the agent itself, whose parent is something else."""
    found: tuple[int, str] | None = None
    for _ in range(12):
        parent, cmdline = _parent(host, pid)
        if found is not None and cmdline != found[1]:
            return found[0]
        if found is not None or Path(cmdline.split("\0")[0]).name.startswith("python3"):
            found = (parent, cmdline)
        pid = parent
    raise AssertionError(f"no python3 agent above the gate process {pid}")


def test_a_transport_lost_mid_transaction_reaches_the_inspector_as_ambiguous_with_the_last_step_done(
    inspector: InstalledTool, gateway: GatewayProcess, host: SystemdHost, tmp_path: Path
) -> None:
    fifo = host.target.root / "tmp/rog-insp-gate.fifo"
    runs = host.target.root / "tmp/rog-insp-gate.runs"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    original = _web_conf(host).read_bytes()
    script = "echo run >> /tmp/rog-insp-gate.runs; echo $$ > /tmp/rog-insp-gate.fifo; exec sleep 120"
    gate_pid = None
    pool = concurrent.futures.ThreadPoolExecutor(2)  # the Inspector call, and the FIFO's reader
    try:
        call = pool.submit(
            _call, inspector, gateway, tmp_path, "admin_transaction", target="sd", settle_s=5,
            change={"kind": "file", "path": "/etc/rog/web.conf", "content": "ok lost\n",
                    "then": {"unit": "rog-web.service", "action": "restart"}},
            gates=[{"kind": "command", "argv": ["sh", "-c", script]}],
        )  # fmt: skip
        gate_pid = int(pool.submit(fifo.read_text).result(timeout=90).strip())  # the gate is running
        host.target.run("kill", "-KILL", str(_ancestor_agent(host, gate_pid)))
        out = call.result(timeout=120)
        assert out["outcome"] == "ambiguous", out["steps"]
        assert [(s["name"], s["status"]) for s in out["steps"]] == [
            ("snapshot", "done"), ("write", "done"), ("unit_action", "done"), ("gates", "ambiguous")
        ]  # fmt: skip
        assert out["last_done_step"] == "unit_action"
        assert runs.read_text() == "run\n"  # never re-sent
        assert _web_conf(host).read_bytes() == b"ok lost\n"  # nothing rolled back on a guess
    finally:
        with contextlib.suppress(OSError):  # release a reader still waiting in open()
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pool.shutdown(wait=True)
        if gate_pid is not None:
            host.target.run("kill", "-KILL", str(gate_pid), check=False)
        fifo.unlink(missing_ok=True)
        runs.unlink(missing_ok=True)
        _web_conf(host).write_bytes(original)
        host.target.systemctl("restart", "rog-web.service")
