"""Fleet operations through a gateway of the phase's own over MCP/HTTP: many aliases of the run's sshd are
distinct targets (own identity, master, agent). ``exec_many`` over a labelled group reads as one output
group with progress per target; ``serial`` with a failure budget stops after the batch that spent it
(refused and closed targets are real failures); a failed canary starts nothing else; ``upload_many`` lands
one file, SHA-256 verified, on every target; a name outside the allow-list is a ``policy_denied`` record.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
from pathlib import Path
from typing import Any

from acceptance._mcp import error_code, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.fleet_hosts import write_fleet_config
from acceptance.phases._util import ms_figures, shared_dir, timed

__all__ = ["fleet"]


@phase(
    "fleet",
    "fleet operations (exec_many, upload_many: forks, serial, canary, failure budget)",
    needs=("sshd",),
)
async def fleet(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    sshd = env.sshd
    count = ctx.n(12, 40)
    cfg_dir = shared_dir(ctx, "rogaf-")
    local = shared_dir(ctx, "rogafl-")
    hosts = write_fleet_config(cfg_dir, [sshd], count, include=sshd.ssh_config)
    targets: list[dict[str, Any]] = [
        {"name": alias, "host": alias, "labels": {"role": "web" if n % 2 == 0 else "db"}}
        for n, alias in enumerate(hosts.aliases)
    ]
    targets += [{"name": role, "host": sshd.alias(role)} for role in ("wrongkey", "closed")]
    config = {
        "transport": {
            "ssh_config_file": str(hosts.ssh_config),
            "control_dir": str(env.control_dir()),
            "connect_timeout_s": 5,
        },
        "targets": targets,
        "groups": {"web": [{"labels": {"role": "web"}}], "all": list(hosts.aliases)},
        "transfers": {"local_roots": [str(local)], "min_free_bytes": 0},
        "tools": {"toolsets": ["inspect", "execute"]},
    }
    gw = await ctx.stack.enter_async_context(env.extra_gateway("fleet", config))
    client = await ctx.stack.enter_async_context(env.client_of(gw))
    call = client.call

    # -- one command on a labelled group: one output group, progress per finished target ----------------
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    web = [a for n, a in enumerate(hosts.aliases) if n % 2 == 0]
    result, cold_ms = await timed(
        call("exec_many", {"group": "web", "argv": ["uname", "-s"], "forks": 8}, progress=on_progress)
    )
    out = structured(result)
    ctx.check(out["summary"]["counts"] == {"ok": len(web)}, f"web group: {out['summary']}")
    ctx.check(len(out["groups"]) == 1 and out["groups"][0]["targets"] == web, f"groups: {out['groups']}")
    ctx.check(sorted(progress) == [float(i) for i in range(1, len(web) + 1)], f"progress: {progress}")

    result, all_ms = await timed(call("exec_many", {"group": "all", "argv": ["true"], "forks": 16}))
    everything = structured(result)
    ctx.check(everything["summary"]["counts"] == {"ok": count}, f"all: {everything['summary']}")
    per_target = [r["duration_ms"] for r in everything["records"]]

    # -- serial 2, a failure budget of 1: the second batch (a refused key, a closed port) spends it --------
    order = [hosts.aliases[0], hosts.aliases[1], "wrongkey", "closed", *hosts.aliases[2:6]]
    out = structured(
        await call("exec_many", {"targets": order, "argv": ["true"], "serial": 2, "max_failures": 1})
    )
    outcomes = [r["outcome"] for r in out["records"]]
    ctx.check(outcomes == ["ok", "ok", "error", "error", *["skipped"] * 4], f"budget: {outcomes}")
    codes = [r["error"]["code"] for r in out["records"][2:4]]
    ctx.check(codes == ["auth_error", "connect_error"], f"failure codes: {codes}")
    ctx.check(out["summary"]["stopped"] == "failure_budget", f"stopped: {out['summary']}")

    # -- a failed canary starts nothing else; an unknown name is a policy_denied record -----------------
    out = structured(
        await call("exec_many", {"targets": ["nope", *hosts.aliases[:4]], "shell": "exit 3", "canary": 1})
    )
    got = [(r["target"], r["outcome"]) for r in out["records"]]
    want = [("nope", "policy_denied"), (hosts.aliases[0], "nonzero_exit")]
    want += [(a, "skipped") for a in hosts.aliases[1:4]]
    ctx.check(got == want, f"canary: {got}")
    bad = await call("exec_many", {"group": "nope", "argv": ["true"]})
    ctx.check(error_code(bad) == "validation_error", f"unknown group: {bad}")

    # -- one file to several targets, SHA-256 verified on each -------------------------------------------
    payload = os.urandom(256 * 1024)
    (local / "payload.bin").write_bytes(payload)
    name = f"rogaf-{os.getpid()}"
    home = Path(pwd.getpwnam(sshd.users["plain"]).pw_dir)
    ctx.stack.callback(shutil.rmtree, home / name, True)
    ctx.created(f"{home / name} removed", lambda: not (home / name).exists())
    n_up = ctx.n(3, 8)
    args = {
        "targets": list(hosts.aliases[:n_up]),
        "local_path": "payload.bin",
        "remote_path": f"{name}/payload.bin",
        "create_parents": True,
        "overwrite": "replace",
        "forks": 1,  # the aliases share one file system here: one at a time onto the one path
    }
    out = structured(await call("upload_many", args))
    digest = hashlib.sha256(payload).hexdigest()
    ctx.check(out["summary"]["counts"] == {"ok": n_up}, f"upload_many: {out['summary']}")
    ctx.check(
        {r["sha256"] for r in out["records"]} == {digest}, "every copy verified with the file's SHA-256"
    )
    ctx.check((home / name / "payload.bin").read_bytes() == payload, "the file on the target is the file")

    ctx.figures.update(
        {
            "targets": count,
            "exec_many_group_ms": round(cold_ms, 1),
            "exec_many_all_ms": round(all_ms, 1),
            **ms_figures("per_target", per_target),
        }
    )
