"""``admin_transaction`` against a real systemd target (acceptance/harness/systemd_helpers.py) as the plain
login user ``plain`` (NOPASSWD sudo): a root-owned file is replaced through the root provider (or the write
step fails, changing nothing), and a transport lost in the middle of the gates is ``ambiguous`` with the
last step known to be done, nothing retried and nothing rolled back over the lost connection. Skipped, with
the reason, where the machine cannot boot a systemd target."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acceptance.harness.systemd_helpers import SystemdHost, booted, unavailable_reason
from remoteops import PrivilegeSettings, RemoteOps, TargetSpec, TransactionRequest, TransactionResult
from remoteops.systemd.transaction import run_transaction

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT_CONF = "/etc/rog-root.conf"


@pytest.fixture(scope="module")
def host() -> Iterator[SystemdHost]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot boot a systemd target here: {reason}")
    with booted() as booted_host:
        yield booted_host


@pytest.fixture
def root_conf(host: SystemdHost, request: pytest.FixtureRequest) -> Iterator[Path]:
    """``/etc/rog-root.conf`` owned by root (mode: the indirect parameter, default 0644)."""
    mode = int(getattr(request, "param", 0o644))
    path = host.target.root / ROOT_CONF.lstrip("/")
    path.write_bytes(b"ok root v1\n")
    os.chown(path, 0, 0)
    path.chmod(mode)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _file_tx(
    path: str, content: str, gates: list[dict[str, Any]], *, privilege: str = "auto", settle_s: float = 0
) -> TransactionRequest:
    return TransactionRequest.model_validate(
        {"target": "sd", "change": {"kind": "file", "path": path, "content": content}, "gates": gates,
         "settle_s": settle_s, "privilege": privilege}
    )  # fmt: skip


def _ok_gate(path: str) -> dict[str, Any]:
    return {"kind": "command", "argv": ["sudo", "-n", "grep", "-q", "^ok", path]}


def _sha(path: Path) -> str:
    return hashlib.sha256(_bytes(path)).hexdigest()


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def _owner_mode(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def _step(result: TransactionResult, name: str) -> dict[str, Any]:
    [step] = [s for s in result.steps if s.name == name]
    return step.model_dump()


async def test_auto_replaces_a_root_owned_file_as_root_after_the_agent_is_refused_keeping_owner_and_mode(
    host: SystemdHost, root_conf: Path
) -> None:
    async with host.ops() as ops:
        r = await ops.systemd.transaction(
            _file_tx(ROOT_CONF, "ok root v2\n", [_ok_gate(ROOT_CONF)]), escalate=True
        )
    assert r.outcome == "committed", r.steps
    assert _bytes(root_conf) == b"ok root v2\n"
    assert r.file_sha256_written == _sha(root_conf)
    assert _owner_mode(root_conf) == (0, 0, 0o644)
    write = _step(r, "write")["data"]["privilege"]
    assert write["ran_as"] == "root"
    assert write["escalated_after_denial"] is True
    assert [a["provider"] for a in write["attempts"]] == ["user", "sudo_nopasswd"]
    assert _step(r, "snapshot")["data"]["privilege"]["ran_as"] == "user"  # 0644: readable by the login user
    leftovers = [p.name for p in root_conf.parent.iterdir() if p.name.startswith(".rog-root.conf")]
    assert leftovers == []


@pytest.mark.parametrize("root_conf", [0o600], indirect=True, ids=["mode-0600"])
async def test_root_restores_an_unreadable_root_file_byte_identically_when_its_gate_fails(
    host: SystemdHost, root_conf: Path
) -> None:
    before = _sha(root_conf)
    async with host.ops() as ops:
        tx = _file_tx(ROOT_CONF, "broken\n", [_ok_gate(ROOT_CONF)], privilege="root")
        r = await ops.systemd.transaction(tx, escalate=True)
    assert r.outcome == "rolled_back", r.steps
    assert [s.name for s in r.steps] == ["snapshot", "write", "gates", "restore_file", "verify"]
    assert _sha(root_conf) == before == r.file_sha256_before
    assert r.file_sha256_written == hashlib.sha256(b"broken\n").hexdigest()
    assert _owner_mode(root_conf) == (0, 0, 0o600)
    assert _step(r, "snapshot")["data"]["privilege"]["ran_as"] == "root"
    assert _step(r, "verify")["data"] == {"file_restored": True}


async def test_a_root_owned_file_without_escalation_fails_the_write_step_and_changes_nothing(
    host: SystemdHost, root_conf: Path
) -> None:
    before = _bytes(root_conf)
    async with host.ops() as ops:
        user = await ops.systemd.transaction(
            _file_tx(ROOT_CONF, "ok new\n", [_ok_gate(ROOT_CONF)], privilege="user"), escalate=True
        )
        not_allowed = await ops.systemd.transaction(
            _file_tx(ROOT_CONF, "ok new\n", [_ok_gate(ROOT_CONF)], privilege="auto"), escalate=False
        )
    for r in (user, not_allowed):
        assert r.outcome == "change_failed", r.steps
        assert [(s.name, s.status) for s in r.steps] == [("snapshot", "done"), ("write", "failed")]
        assert _step(r, "write")["data"]["privilege"]["ran_as"] == "user"
    assert _bytes(root_conf) == before


async def test_a_root_owned_file_changed_by_someone_else_meanwhile_is_a_conflict_and_stays(
    host: SystemdHost, root_conf: Path
) -> None:
    meddle = {
        "kind": "command",
        "argv": ["sudo", "-n", "sh", "-c", f"echo 'ok meddled' > {ROOT_CONF}; exit 1"],
    }
    async with host.ops() as ops:
        r = await ops.systemd.transaction(_file_tx(ROOT_CONF, "ok v2\n", [meddle]), escalate=True)
    assert r.conflict
    assert r.outcome == "rollback_incomplete"
    assert _step(r, "restore_file")["status"] == "conflict"
    assert _bytes(root_conf) == b"ok meddled\n"


# -- a transport lost in the middle ------------------------------------------------------------------------

_GATE_FIFO = "/tmp/rog-gate.fifo"
_GATE_RUNS = "/tmp/rog-gate.runs"


@pytest.fixture
def blocking_gate(host: SystemdHost) -> Iterator[dict[str, Any]]:
    """A command gate that records each run, hands its pid over a FIFO the test reads, then blocks."""
    fifo = host.target.root / _GATE_FIFO.lstrip("/")
    runs = host.target.root / _GATE_RUNS.lstrip("/")
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    script = f"echo run >> {_GATE_RUNS}; echo $$ > {_GATE_FIFO}; exec sleep 120"
    try:
        yield {"kind": "command", "argv": ["sh", "-c", script]}
    finally:
        with contextlib.suppress(OSError):  # release a reader still waiting in open()
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        fifo.unlink(missing_ok=True)
        runs.unlink(missing_ok=True)


async def _gate_pid(host: SystemdHost) -> int:
    fifo = host.target.root / _GATE_FIFO.lstrip("/")
    with anyio.fail_after(60):
        text = await anyio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)
    return int(text.strip())


async def _kill_agent(host: SystemdHost, ops: RemoteOps) -> None:
    pid = ops.stats().carriers["sd"].agent_pid  # in the target's PID namespace
    assert pid is not None
    host.target.run("kill", "-KILL", str(pid))


async def _kill_master(host: SystemdHost, ops: RemoteOps) -> None:
    [info] = [t for t in await ops.list_targets() if t.name == "sd"]
    pid = info.multiplex.master_pid  # the ControlMaster this test's RemoteOps started, on this machine
    assert pid is not None
    os.kill(pid, 9)


@pytest.mark.parametrize("lose", [_kill_agent, _kill_master], ids=["agent-killed", "controlmaster-killed"])
async def test_a_transport_lost_during_the_gates_is_ambiguous_after_the_unit_action_and_nothing_is_retried(
    host: SystemdHost, blocking_gate: dict[str, Any], lose: Any
) -> None:
    conf = host.target.root / "etc/rog/web.conf"
    original = conf.read_bytes()
    tx = TransactionRequest.model_validate(
        {"target": "sd", "change": {"kind": "file", "path": "/etc/rog/web.conf", "content": "ok lost\n",
                                    "then": {"unit": "rog-web.service", "action": "restart"}},
         "gates": [blocking_gate], "settle_s": 5}
    )  # fmt: skip
    gate_pid = None
    try:
        async with host.ops() as ops:
            result: list[TransactionResult] = []

            async def transact() -> None:
                result.append(await ops.systemd.transaction(tx, escalate=True))

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(transact)
                    gate_pid = await _gate_pid(host)  # the gate is running: every earlier step is done
                    await lose(host, ops)
        [r] = result
        assert r.outcome == "ambiguous", r.steps
        assert [(s.name, s.status) for s in r.steps] == [
            ("snapshot", "done"),
            ("write", "done"),
            ("unit_action", "done"),
            ("gates", "ambiguous"),
        ]
        assert r.last_done_step == "unit_action"
        runs = (host.target.root / _GATE_RUNS.lstrip("/")).read_text()
        assert runs == "run\n"  # the gate ran once: never re-sent on a new connection
        assert conf.read_bytes() == b"ok lost\n"  # what was written stays: no rollback was guessed
    finally:
        if gate_pid is not None:
            host.target.run("kill", "-KILL", str(gate_pid), check=False)
        conf.write_bytes(original)
        host.target.systemctl("restart", "rog-web.service")


class _Recorder:
    """The real facade, with every command it is asked to run recorded (argv, stdin)."""

    def __init__(self, ops: RemoteOps) -> None:
        self.ops = ops
        self.commands: list[tuple[list[str], bytes | None, str]] = []

    async def run(self, target: str, argv: Any = None, shell: Any = None, **kw: Any) -> Any:
        self.commands.append((list(argv or ()), kw.get("stdin"), str(kw.get("privilege", "user"))))
        return await self.ops.run(target, argv, shell, **kw)

    async def agent_request(self, target: str, kind: int, meta: dict[str, Any], data: bytes = b"") -> Any:
        return await self.ops.agent_request(target, kind, meta, data)


async def test_the_root_write_carries_the_content_on_stdin_never_in_argv(
    host: SystemdHost, root_conf: Path
) -> None:
    secret = "ok-payload-" + os.urandom(8).hex() + "\n"
    async with host.ops() as ops:
        recorder = _Recorder(ops)
        r = await run_transaction(recorder, ops.systemd, _file_tx(ROOT_CONF, secret, [_ok_gate(ROOT_CONF)]),
                                  escalate=True)  # fmt: skip
    assert r.outcome == "committed", r.steps
    assert _bytes(root_conf) == secret.encode()
    roots = [(argv, stdin) for argv, stdin, privilege in recorder.commands if privilege != "user"]
    assert [stdin for _, stdin in roots] == [secret.encode()]  # the one root write: its content on stdin
    assert not any(secret.strip() in word for argv, _, _ in recorder.commands for word in argv)


def _ssh_carrier_ops(host: SystemdHost) -> RemoteOps:
    spec = TargetSpec(name="sd", host=host.spec.host, carrier="ssh")
    return RemoteOps(host.settings, [spec], privilege=PrivilegeSettings(providers=("sudo_nopasswd",)))


async def test_on_the_ssh_carrier_a_file_transaction_rolls_back_and_a_root_file_is_replaced_as_root(
    host: SystemdHost, root_conf: Path
) -> None:
    web = host.target.root / "etc/rog/web.conf"
    before = _sha(web)
    change = {"unit": "rog-web.service", "action": "restart"}
    tx = TransactionRequest.model_validate(
        {"target": "sd", "change": {"kind": "file", "path": "/etc/rog/web.conf", "content": "broken\n",
                                    "then": change},
         "gates": [{"kind": "unit_active", "unit": "rog-web.service"}], "settle_s": 1}
    )  # fmt: skip
    async with _ssh_carrier_ops(host) as ops:
        rolled = await ops.systemd.transaction(tx, escalate=True)
        root = await ops.systemd.transaction(
            _file_tx(ROOT_CONF, "ok over ssh\n", [_ok_gate(ROOT_CONF)]), escalate=True
        )
        assert ops.stats().carriers["sd"].carrier == "ssh"
    assert rolled.outcome == "rolled_back", rolled.steps
    assert _sha(web) == before
    assert _step(rolled, "write")["data"]["privilege"] == {
        **_step(rolled, "write")["data"]["privilege"], "ran_as": "user", "via": "exec"
    }  # fmt: skip
    assert root.outcome == "committed", root.steps
    assert _bytes(root_conf) == b"ok over ssh\n"
    assert _owner_mode(root_conf) == (0, 0, 0o644)
    write = _step(root, "write")["data"]["privilege"]
    assert (write["ran_as"], write["escalated_after_denial"]) == ("root", True)
