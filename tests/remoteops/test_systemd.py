"""systemd operations against a real systemd target (acceptance/harness/systemd_helpers.py) over SSH, as the
plain login user ``plain`` (NOPASSWD sudo: ``privilege: auto`` escalates through ``sudo_nopasswd``).
Skipped, with the reason, where the machine cannot boot a systemd target."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import anyio
import pytest

from acceptance.harness.systemd_helpers import LOG_LINES, SystemdHost, booted, unavailable_reason
from remoteops import InvalidRequest, PolicyDenied, TransactionRequest

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOSTILE = [
    "-rf.service",
    "foo;reboot.service",
    "foo bar.service",
    "$(id).service",
    "foo\\ybar.service",
    "foo\\x2D.service",
    "../etc/passwd",
    "nginx",
    "foo.service\n",
    "`id`.socket",
]


@pytest.fixture(scope="module")
def host() -> Iterator[SystemdHost]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot boot a systemd target here: {reason}")
    with booted() as booted_host:
        yield booted_host


async def test_hostile_unit_names_are_refused_before_any_process_starts_on_the_target(
    host: SystemdHost,
) -> None:
    async with host.ops() as ops:
        # the connection and the agent exist before counting (the first call may run over ssh while the
        # agent is still booting beside it: its process would appear between the two counts)
        with anyio.fail_after(30):
            await ops.run("sd", ["true"])
            while ops.stats().carriers["sd"].carrier != "agent":
                await anyio.sleep(0.05)
                await ops.run("sd", ["true"])
        before = host.processes()
        for bad in HOSTILE:
            with pytest.raises(InvalidRequest):
                await ops.systemd.action("sd", bad, "start", escalate=True)
            with pytest.raises(InvalidRequest):
                await ops.systemd.status("sd", [bad])
        assert host.processes() == before


async def test_start_stop_restart_enable_disable_mask_unmask_report_states_before_and_after(
    host: SystemdHost,
) -> None:
    unit = "rog-sleep.service"
    async with host.ops() as ops:
        r = await ops.systemd.action("sd", unit, "start", escalate=True)
        assert (r.before and r.before.active_state, r.after and r.after.active_state) == (
            "inactive",
            "active",
        )
        assert r.job_result == "done"
        assert r.settled
        pid = r.after.main_pid if r.after else None
        r = await ops.systemd.action("sd", unit, "restart", escalate=True)
        assert r.after is not None
        assert r.after.active_state == "active"
        assert r.after.main_pid != pid
        r = await ops.systemd.action("sd", unit, "stop", escalate=True)
        assert r.after is not None
        assert r.after.active_state == "inactive"
        r = await ops.systemd.action("sd", unit, "enable", escalate=True)
        assert (r.before and r.before.unit_file_state, r.after and r.after.unit_file_state) == (
            "disabled",
            "enabled",
        )
        r = await ops.systemd.action("sd", unit, "disable", escalate=True)
        assert r.after is not None
        assert r.after.unit_file_state == "disabled"
        r = await ops.systemd.action("sd", unit, "mask", escalate=True)
        assert r.after is not None
        assert r.after.unit_file_state == "masked"
        r = await ops.systemd.action("sd", unit, "start", escalate=True)
        assert r.job_result == "failed"
        assert r.after is not None
        assert r.after.active_state == "inactive"
        r = await ops.systemd.action("sd", unit, "unmask", escalate=True)
        assert r.after is not None
        assert r.after.unit_file_state == "disabled"
    assert host.target.show(unit, "ActiveState")["ActiveState"] == "inactive"


async def test_an_escaped_instance_name_is_started_and_reported(host: SystemdHost) -> None:
    unit = "rog-esc@a\\x2db.service"
    async with host.ops() as ops:
        r = await ops.systemd.action("sd", unit, "start", escalate=True)
        assert r.after is not None
        assert r.after.active_state == "active"
        assert r.after.description == "test escaped a-b"
        await ops.systemd.action("sd", unit, "stop", escalate=True)


async def test_daemon_reload_after_a_unit_file_change_loads_the_new_file(host: SystemdHost) -> None:
    path = host.target.root / "usr/lib/systemd/system/rog-sleep.service"
    original = path.read_text()
    host.target.systemctl("start", "rog-sleep.service")  # loaded: systemd keeps the old file in memory
    path.write_text(original.replace("Description=test sleep", "Description=test sleep v2"))
    try:
        async with host.ops() as ops:
            r = await ops.systemd.daemon_reload("sd", unit="rog-sleep.service", escalate=True)
            assert r.job_result == "done"
            assert r.before is not None
            assert r.before.description == "test sleep"
            assert r.after is not None
            assert r.after.description == "test sleep v2"
    finally:
        path.write_text(original)
        host.target.systemctl("daemon-reload")
        host.target.systemctl("stop", "rog-sleep.service")


async def test_auto_escalates_only_after_systemd_denies_and_user_never_escalates(host: SystemdHost) -> None:
    async with host.ops() as ops:
        denied = await ops.systemd.action("sd", "rog-sleep.service", "start", privilege="user", escalate=True)
        assert denied.job_result == "failed"
        assert denied.privilege.ran_as == "user"
        assert [a.outcome for a in denied.privilege.attempts] == ["denied"]
        assert denied.after is not None
        assert denied.after.active_state == "inactive"
        r = await ops.systemd.action("sd", "rog-sleep.service", "start", privilege="auto", escalate=True)
        assert r.privilege.escalated_after_denial
        assert r.privilege.provider == "sudo_nopasswd"
        assert [a.provider for a in r.privilege.attempts] == ["user", "sudo_nopasswd"]
        reads = await ops.systemd.status("sd", ["rog-sleep.service"])  # reading needs no root
        assert reads[0].active_state == "active"
        r = await ops.systemd.action("sd", "rog-sleep.service", "stop", privilege="auto", escalate=False)
        assert r.job_result == "failed"
        assert r.privilege.ran_as == "user"
        assert [a.outcome for a in r.privilege.attempts] == ["denied", "skipped"]
        with pytest.raises(PolicyDenied):
            await ops.systemd.action("sd", "rog-sleep.service", "stop", privilege="root", escalate=False)
        await ops.systemd.action("sd", "rog-sleep.service", "stop", escalate=True)


async def test_journal_pages_continued_by_cursor_lose_and_repeat_no_line(host: SystemdHost) -> None:
    host.target.systemctl("start", "rog-log.service")
    async with host.ops() as ops:
        seen: list[str] = []
        page = await ops.systemd.journal("sd", unit="rog-log.service", since="today", lines=7, escalate=True)
        assert page.privilege.escalated_after_denial
        pages = 1
        seen += [e.message for e in page.entries]
        while page.more:
            page = await ops.systemd.journal(
                "sd", unit="rog-log.service", cursor=page.cursor, lines=7, escalate=True
            )
            seen += [e.message for e in page.entries]
            pages += 1
        logged = [m for m in seen if m.startswith("log-line-")]
        assert logged == [f"log-line-{i}" for i in range(1, LOG_LINES + 1)]
        assert pages >= LOG_LINES // 7
        cursors = [page.cursor]
        again = await ops.systemd.journal(
            "sd", unit="rog-log.service", cursor=cursors[0], lines=7, escalate=True
        )
        assert again.entries == []
        assert again.cursor == cursors[0]


def _web_conf(host: SystemdHost) -> bytes:
    return (host.target.root / "etc/rog/web.conf").read_bytes()


GATES = [
    {"kind": "unit_active", "unit": "rog-web.service"},
    {"kind": "tcp_port", "port": 8080},
    {"kind": "http_status", "url": "http://127.0.0.1:8080/web.conf", "status": 200},
]


def _tx(content: str, gates: list[dict[str, object]], settle_s: float = 2) -> TransactionRequest:
    return TransactionRequest.model_validate(
        {
            "target": "sd",
            "change": {
                "kind": "file", "path": "/etc/rog/web.conf", "content": content,
                "then": {"unit": "rog-web.service", "action": "restart"},
            },
            "gates": gates,
            "settle_s": settle_s,
        }
    )  # fmt: skip


async def test_a_broken_config_whose_gate_fails_is_rolled_back_byte_identically_and_the_unit_is_active(
    host: SystemdHost,
) -> None:
    before = _web_conf(host)
    async with host.ops() as ops:
        r = await ops.systemd.transaction(_tx("broken\n", GATES), escalate=True)
    assert r.outcome == "rolled_back", r.steps
    names = ["snapshot", "write", "unit_action", "gates", "restore_file", "restore_unit", "verify"]
    assert [s.name for s in r.steps] == names
    assert (
        hashlib.sha256(_web_conf(host)).hexdigest()
        == hashlib.sha256(before).hexdigest()
        == r.file_sha256_before
    )
    assert host.target.show("rog-web.service", "ActiveState")["ActiveState"] == "active"


async def test_a_file_changed_by_someone_else_meanwhile_is_a_conflict_and_stays(host: SystemdHost) -> None:
    original = _web_conf(host)
    other = ["sh", "-c", "echo 'ok someone else' > /etc/rog/web.conf; exit 1"]  # a gate that changes it
    try:
        async with host.ops() as ops:
            r = await ops.systemd.transaction(_tx("ok v2\n", [*GATES, {"kind": "command", "argv": other}], 0))
        assert r.conflict
        assert r.outcome == "rollback_incomplete"
        assert [s.status for s in r.steps if s.name == "restore_file"] == ["conflict"]
        assert _web_conf(host) == b"ok someone else\n"
    finally:
        (host.target.root / "etc/rog/web.conf").write_bytes(original)
        host.target.systemctl("restart", "rog-web.service")


async def test_a_change_whose_gates_pass_is_kept(host: SystemdHost) -> None:
    original = _web_conf(host)
    try:
        async with host.ops() as ops:
            r = await ops.systemd.transaction(_tx("ok v3\n", GATES), escalate=True)
        assert r.outcome == "committed"
        assert r.steps[-1].name == "gates"
        assert _web_conf(host) == b"ok v3\n"
        assert r.file_sha256_written == hashlib.sha256(b"ok v3\n").hexdigest()
    finally:
        (host.target.root / "etc/rog/web.conf").write_bytes(original)
        host.target.systemctl("restart", "rog-web.service")


async def test_a_failed_precheck_changes_nothing(host: SystemdHost) -> None:
    before = _web_conf(host)
    async with host.ops() as ops:
        data = _tx("broken\n", GATES).model_dump()
        req = TransactionRequest.model_validate({**data, "precheck": {"kind": "command", "argv": ["false"]}})
        r = await ops.systemd.transaction(req, escalate=True)
    assert r.outcome == "precheck_failed"
    assert [s.name for s in r.steps] == ["precheck"]
    assert _web_conf(host) == before
