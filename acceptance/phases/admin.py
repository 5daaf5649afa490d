"""``admin``: ``admin_transaction`` on a real systemd target (acceptance/harness/systemd_helpers.py: systemd
252 in its own namespaces, an sshd inside reached through nsenter + nc, the plain login user ``plain`` with
a NOPASSWD sudo rule). A broken config written for ``rog-web.service`` and restarted fails its health gates
and is rolled back byte-identically (SHA-256) with the unit active again; a good one passes and is kept; a
concurrent change made meanwhile is reported as a conflict and left in place; a root-owned file is replaced
through the root provider (``privilege: auto`` after the agent's refusal) and, with a failing gate,
restored byte-identically with its owner and mode."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from typing import Any

from acceptance._registry import PhaseContext, phase
from acceptance.harness.systemd_helpers import SystemdHost, booted, unavailable_reason
from acceptance.harness.systemd_target import host_sysctls
from remoteops import RemoteOps, TransactionRequest

__all__ = ["admin_transaction"]

_GATES: list[dict[str, Any]] = [
    {"kind": "unit_active", "unit": "rog-web.service"},
    {"kind": "tcp_port", "port": 8080},
    {"kind": "http_status", "url": "http://127.0.0.1:8080/web.conf", "status": 200},
]


def _tx(content: str, gates: list[dict[str, Any]], settle_s: float) -> TransactionRequest:
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


async def _scenario(host: SystemdHost, ctx: PhaseContext) -> None:
    conf = host.target.root / "etc/rog/web.conf"
    original = conf.read_bytes()
    async with host.ops() as ops:
        started = time.monotonic()
        broken = await ops.systemd.transaction(_tx("broken\n", _GATES, 3), escalate=True)
        ctx.figures["rollback_transaction_ms"] = round((time.monotonic() - started) * 1000, 1)
        ctx.figures["rollback_steps"] = [f"{s.name}:{s.status}" for s in broken.steps]
        ctx.check(broken.outcome == "rolled_back", f"broken config: {broken.outcome}")
        ctx.check(
            hashlib.sha256(conf.read_bytes()).hexdigest() == hashlib.sha256(original).hexdigest(),
            "the config is byte-identical after the rollback",
        )
        active = host.target.show("rog-web.service", "ActiveState")["ActiveState"]
        ctx.check(active == "active", f"rog-web.service after the rollback: {active}")
        started = time.monotonic()
        good = await ops.systemd.transaction(_tx("ok v2\n", _GATES, 3), escalate=True)
        ctx.figures["committed_transaction_ms"] = round((time.monotonic() - started) * 1000, 1)
        ctx.check(good.outcome == "committed" and conf.read_bytes() == b"ok v2\n", f"good: {good.outcome}")
        meddle = {"kind": "command", "argv": ["sh", "-c", "echo 'ok meddled' > /etc/rog/web.conf; exit 1"]}
        raced = await ops.systemd.transaction(_tx("ok v3\n", [*_GATES, meddle], 0), escalate=True)
        ctx.check(raced.conflict, f"a concurrent change is a conflict: {raced.outcome}")
        ctx.check(conf.read_bytes() == b"ok meddled\n", "the concurrent change was left in place")
        ctx.figures["conflict_outcome"] = raced.outcome
        await _root_file(host, ctx, ops)


async def _root_file(host: SystemdHost, ctx: PhaseContext, ops: RemoteOps) -> None:
    path = host.target.root / "etc/rog-admin-root.conf"
    path.write_bytes(b"ok root v1\n")
    os.chown(path, 0, 0)
    path.chmod(0o640)
    original = hashlib.sha256(path.read_bytes()).hexdigest()
    conf = "/etc/rog-admin-root.conf"
    gate = {"kind": "command", "argv": ["sudo", "-n", "grep", "-q", "^ok", conf]}

    def tx(content: str) -> TransactionRequest:
        return TransactionRequest.model_validate(
            {"target": "sd", "change": {"kind": "file", "path": str(conf), "content": content},
             "gates": [gate], "settle_s": 0}
        )  # fmt: skip

    try:
        broken = await ops.systemd.transaction(tx("broken\n"), escalate=True)
        ctx.figures["root_file_rollback_steps"] = [f"{s.name}:{s.status}" for s in broken.steps]
        st = path.stat()
        ctx.check(broken.outcome == "rolled_back", f"root-owned file, broken: {broken.outcome}")
        ctx.check(
            hashlib.sha256(path.read_bytes()).hexdigest() == original
            and (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o640),
            "the root-owned file is byte-identical, root's and 0640 after the rollback",
        )
        good = await ops.systemd.transaction(tx("ok root v2\n"), escalate=True)
        write = next((s for s in good.steps if s.name == "write"), None)
        ran_as = write.data.get("privilege", {}).get("ran_as") if write else None
        ctx.figures["root_file_write_ran_as"] = ran_as
        ctx.check(
            good.outcome == "committed" and path.read_bytes() == b"ok root v2\n" and ran_as == "root",
            f"root-owned file, good: {good.outcome} (write ran as {ran_as})",
        )
    finally:
        path.unlink(missing_ok=True)


@phase("admin", "admin_transaction on a real systemd: byte-identical rollback, commit, conflict kept")
async def admin_transaction(ctx: PhaseContext) -> None:
    reason = unavailable_reason()
    if reason is not None:
        ctx.skip(f"cannot boot a systemd target here: {reason}")
    before = host_sysctls()
    ctx.created("host fs.protected_* sysctls unchanged", lambda: host_sysctls() == before)
    with booted() as host:
        cgroup = host.target.cgroup
        ctx.figures["boot_s"] = host.target.boot_s
        await _scenario(host, ctx)
    ctx.created(f"target cgroup {cgroup} removed", lambda: not cgroup.exists())
