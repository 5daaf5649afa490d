"""The fleet tools through MCP against the real sshd (aliases of one sshd are distinct targets): results
that read as one group, progress per target, policy_denied records for targets outside an OAuth caller's
grants and outside the root allow-list, and upload_many verified on every target, one of them a really full
disk (a filled tmpfs) reported as its own failure."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp_types as types
import pytest
from mcp.server.auth.provider import AccessToken

from acceptance.harness.fleet_hosts import FleetHosts, full_filesystem, write_fleet_config
from gateway._dispatch import dispatch_call, error_payload
from gateway.auth.policy import GROUPS_CLAIM, KIND_CLAIM, Policy, Principal
from tests.fixtures.procs import processes_mentioning
from tests.fixtures.sshd import SshdInstance
from tests.gateway.conftest import ClientFactory, read_audit

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def hosts(sshd: SshdInstance) -> Iterator[FleetHosts]:
    with tempfile.TemporaryDirectory(prefix="rogft-") as directory:
        yield write_fleet_config(Path(directory), [sshd], 10, include=sshd.ssh_config)


def _config(sshd: SshdInstance, hosts: FleetHosts, **extra: Any) -> dict[str, Any]:
    targets: list[dict[str, Any]] = [
        {"name": alias, "host": alias, "labels": {"role": "web" if n < 6 else "db"}}
        for n, alias in enumerate(hosts.aliases)
    ]
    return {
        "transport": {"ssh_config_file": str(hosts.ssh_config), "control_dir": str(sshd.control_dir)},
        "targets": targets,
        "groups": {"web": [{"labels": {"role": "web"}}], "pair": [hosts.aliases[0], hosts.aliases[9]]},
        **extra,
    }


async def test_exec_many_reads_as_one_group_with_progress_per_target(
    gateway_client: ClientFactory, sshd: SshdInstance, hosts: FleetHosts
) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with gateway_client(**_config(sshd, hosts)) as (client, rt):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        args = {"labels": {"role": "web"}, "argv": ["echo", "same answer"], "forks": 4}
        with anyio.fail_after(120):
            result = await client.call_tool("exec_many", args, progress_callback=on_progress)
        assert result.is_error is not True, result
        out = result.structured_content
        assert out is not None
        jsonschema.validate(out, tools["exec_many"].output_schema)
        assert out["summary"]["counts"] == {"ok": 6}
        [group] = out["groups"]
        assert (group["count"], group["stdout"], group["exit_code"]) == (6, "same answer\n", 0)
        assert group["targets"] == list(hosts.aliases[:6])
        assert [r["output_group"] for r in out["records"]] == [0] * 6
        assert "6 targets: 6 ok" in result.content[0].text
        assert sorted(p[0] for p in progress) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        assert {p[1] for p in progress} == {6.0}
        audit = await read_audit(rt)
    assert '"tool": "exec_many"' in audit
    assert '"selected": 6' in audit


async def test_target_list_filters_by_selector(
    gateway_client: ClientFactory, sshd: SshdInstance, hosts: FleetHosts
) -> None:
    async with gateway_client(**_config(sshd, hosts)) as (client, _):
        result = await client.call_tool("target_list", {"group": "pair"})
        names = [t["name"] for t in (result.structured_content or {})["targets"]]
        assert names == [hosts.aliases[0], hosts.aliases[9]]
        result = await client.call_tool("target_list", {"labels": {"role": "db"}})
        listed = (result.structured_content or {})["targets"]
        assert [t["labels"] for t in listed] == [{"role": "db"}] * 4
        result = await client.call_tool("target_list", {"labels": {"role": "nope"}})
        assert (result.structured_content or {})["targets"] == []


async def test_a_failing_canary_and_a_bad_group_through_mcp(
    gateway_client: ClientFactory, sshd: SshdInstance, hosts: FleetHosts
) -> None:
    async with gateway_client(**_config(sshd, hosts)) as (client, _):
        result = await client.call_tool("exec_many", {"group": "web", "shell": "exit 7", "canary": 2})
        out = result.structured_content or {}
        assert [r["outcome"] for r in out["records"]] == ["nonzero_exit"] * 2 + ["skipped"] * 4
        assert {r["reason"] for r in out["records"][2:]} == {"canary_failed"}
        assert out["summary"]["stopped"] == "canary_failed"
        bad = await client.call_tool("exec_many", {"group": "nope", "argv": ["true"]})
        error = error_payload(bad)
        assert error is not None
        assert error["code"] == "validation_error"
        none = await client.call_tool("exec_many", {"argv": ["true"]})
        assert (error_payload(none) or {}).get("code") == "validation_error"
        many = await client.call_tool("exec_many", {"group": "web", "argv": ["true"], "forks": 1000})
        assert (error_payload(many) or {}).get("code") == "validation_error"


async def test_an_oauth_caller_whose_grants_cover_part_of_a_group_gets_the_rest_as_policy_denied(
    gateway_client: ClientFactory, sshd: SshdInstance, hosts: FleetHosts
) -> None:
    granted = list(hosts.aliases[:3])
    extra = {"auth": {"grants": [{"subject": "alice", "targets": granted}]}}
    async with gateway_client(**_config(sshd, hosts, **extra)) as (_, rt):
        policy = Policy.from_settings(rt.settings.auth)
        token = AccessToken(
            token="t",
            client_id="c",
            scopes=["remoteops:execute"],
            subject="alice",
            claims={KIND_CLAIM: "oauth", GROUPS_CLAIM: []},
        )
        alice = policy.principal(token, Principal.operator("stdio", "operator"))
        params = types.CallToolRequestParams(name="exec_many", arguments={"group": "web", "argv": ["true"]})
        with anyio.fail_after(120):
            result = await dispatch_call(rt, params, principal=alice, policy=policy)
    out = result.structured_content or {}
    by_outcome: dict[str, list[str]] = {}
    for record in out["records"]:
        by_outcome.setdefault(record["outcome"], []).append(record["target"])
    assert by_outcome == {"ok": granted, "policy_denied": list(hosts.aliases[3:6])}
    denied = [r for r in out["records"] if r["outcome"] == "policy_denied"]
    assert {r["error"]["code"] for r in denied} == {"policy_denied"}
    assert {r["error"]["details"]["reason"] for r in denied} == {"not_granted"}
    assert out["summary"]["counts"] == {"ok": 3, "policy_denied": 3}


async def test_root_exec_many_runs_as_root_only_on_the_root_allow_list(
    gateway_client: ClientFactory, sshd: SshdInstance
) -> None:
    with tempfile.TemporaryDirectory(prefix="rogft-") as directory:
        hosts = write_fleet_config(Path(directory), [sshd], 3, role="sudo", include=sshd.ssh_config)
        config: dict[str, Any] = {
            "transport": {"ssh_config_file": str(hosts.ssh_config), "control_dir": str(sshd.control_dir)},
            "targets": [{"name": a, "host": a} for a in hosts.aliases],
        }
        config["root"] = {"targets": list(hosts.aliases[:2]), "providers": ["sudo_nopasswd"]}
        config["tools"] = {"toolsets": ["inspect", "execute", "root"]}
        async with gateway_client(**config) as (client, _):
            args = {"targets": list(hosts.aliases), "argv": ["id", "-u"]}
            with anyio.fail_after(120):
                result = await client.call_tool("root_exec_many", args)
    out = result.structured_content or {}
    got = {
        r["target"]: (r["outcome"], r["error"]["details"]["reason"] if r["error"] else None)
        for r in out["records"]
    }
    assert got == {
        hosts.aliases[0]: ("ok", None),
        hosts.aliases[1]: ("ok", None),
        hosts.aliases[2]: ("policy_denied", "not_root_allowed"),
    }
    [group] = out["groups"]
    assert group["stdout"] == "0\n"


async def test_upload_many_verifies_every_target_and_a_full_disk_is_its_own_failure(
    gateway_client: ClientFactory, sshd: SshdInstance, tmp_path: Path
) -> None:
    local_root = tmp_path / "local"
    local_root.mkdir()
    payload = secrets.token_bytes(300 * 1024)  # more than the full file system could ever take
    (local_root / "payload.bin").write_bytes(payload)
    name = f"rogfleet-{secrets.token_hex(4)}"
    plain_home = Path(pwd.getpwnam(sshd.users["plain"]).pw_dir)
    full_home = Path(pwd.getpwnam(sshd.users["sudo"]).pw_dir)
    with tempfile.TemporaryDirectory(prefix="rogft-") as directory, contextlib.ExitStack() as stack:
        cfg = Path(directory)
        (cfg / "a").mkdir()
        (cfg / "b").mkdir()
        nine = write_fleet_config(cfg / "a", [sshd], 9)
        # the tenth target logs in as another user: its home holds the full file system at the same path
        full = write_fleet_config(cfg / "b", [sshd], 1, role="sudo", prefix="full")
        merged = cfg / "ssh_config"
        merged.write_text(nine.ssh_config.read_text() + "\n" + full.ssh_config.read_text())
        names = [*nine.aliases, *full.aliases]
        config = {
            "transport": {"ssh_config_file": str(merged), "control_dir": str(sshd.control_dir)},
            "targets": [{"name": a, "host": a} for a in names],
            "transfers": {"local_roots": [str(local_root)]},
        }
        try:
            stack.enter_context(full_filesystem(full_home / name))
        except OSError as exc:
            pytest.skip(f"no full file system here: {exc}")
        stack.callback(shutil.rmtree, plain_home / name, ignore_errors=True)
        async with gateway_client(**config) as (client, _):
            args = {
                "targets": names,
                "local_path": "payload.bin",
                "remote_path": f"{name}/payload.bin",
                "create_parents": True,
                "overwrite": "replace",
                "forks": 4,
            }
            with anyio.fail_after(180):
                result = await client.call_tool("upload_many", args)
    assert result.is_error is not True, result
    out = result.structured_content or {}
    digest = hashlib.sha256(payload).hexdigest()
    assert out["sha256"] == digest
    records = {r["target"]: r for r in out["records"]}
    assert {records[n]["outcome"] for n in nine.aliases} == {"ok"}
    assert {records[n]["sha256"] for n in nine.aliases} == {digest}
    failed = records[full.aliases[0]]
    assert failed["outcome"] == "error"
    assert failed["error"]["code"] in ("remote_nonzero_exit", "checksum_mismatch")
    assert out["summary"]["counts"] == {"ok": 9, "error": 1}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_an_exec_many_the_client_cancels_starts_nothing_more_and_leaves_no_process(
    gateway_client: ClientFactory, sshd: SshdInstance, hosts: FleetHosts, shared_dir: Path
) -> None:
    marker = f"rogfleetmcp-{secrets.token_hex(8)}"
    shared = shared_dir  # the target user writes here (the target is this machine)
    env = {"ROG_TEST_MARK": marker, "D": str(shared)}
    args = {"group": "web", "shell": 'echo x >> "$D/started" && exec sleep 315', "forks": 2, "env": env}
    try:
        async with gateway_client(**_config(sshd, hosts)) as (client, _):
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:

                    async def call() -> None:
                        await client.call_tool("exec_many", args)

                    tg.start_soon(call)
                    while _lines(shared / "started") < 2:  # noqa: ASYNC110 - written on the targets
                        await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()  # the client abandons its request: notifications/cancelled
                while processes_mentioning(marker, environ=True):  # noqa: ASYNC110 - the gateway kills them
                    await anyio.sleep(0.05)
            health = await client.call_tool("gateway_health", {})
        started = (shared / "started").read_text()
    finally:
        for pid in processes_mentioning(marker, environ=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert health.is_error is not True
    assert started == "x\n" * 2  # on the targets: the two running were killed, the other four never ran


async def test_many_different_large_outputs_share_one_budget_per_result(
    gateway_client: ClientFactory, sshd: SshdInstance, hosts: FleetHosts
) -> None:
    async with gateway_client(**_config(sshd, hosts)) as (client, _):
        args = {
            "targets": list(hosts.aliases),
            "shell": "head -c 60000 /dev/urandom | base64 -w0",  # 80 kB, different on every target
            "output_cap_bytes": 65536,
            "forks": 5,
        }
        with anyio.fail_after(120):
            result = await client.call_tool("exec_many", args)
    out = result.structured_content or {}
    assert out["summary"]["counts"] == {"ok": 10}
    assert len(out["groups"]) == 10
    assert all(g["stdout_truncated"] for g in out["groups"])
    assert sum(len(g["stdout"]) for g in out["groups"]) <= 512 * 1024 + 10 * 8
