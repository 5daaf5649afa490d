"""Redaction: planted secrets travel through the gateway (exec stdin and env, an upstream credential, a
relayed argument) and are then searched for in every output of the run — every gateway's audit files and
stderr, every MCP result the suite received, and every process command line (also while a command holding
a secret on stdin runs). The bearer tokens are searched for too. Positive controls keep the search honest:
the secrets did arrive, the audit holds their digests, the process scan sees the running command.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import anyio

from acceptance._env import Env
from acceptance._mcp import structured
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import wait_relay_ok, wait_until

__all__ = ["redaction"]

ENV_IN_ARGV = (
    "exec_env is not searched in process command lines: remote_exec exports env values in the remote "
    "command line by design (README: payloads and secrets go on stdin)"
)


def _cmdlines() -> list[bytes]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes())
            except OSError:  # ended while we looked
                continue
    return found


def _outputs(env: Env) -> dict[str, str]:
    """Every output of the run, by name."""
    outputs: dict[str, str] = {"mcp_results": "\n".join(env.seen)}
    for gw in env.gateways:
        outputs[f"gateway {gw.proc.pid} stderr"] = gw.stderr_text()
        audit = Path(gw.info["audit_file"])
        for path in sorted(audit.parent.glob(audit.name + "*")):
            outputs[f"gateway {gw.proc.pid} {path.name}"] = path.read_text(encoding="utf-8", errors="replace")
    return outputs


def _shared_dir() -> Path:
    """A directory the target's plain user can write its marker to (the target is this machine)."""
    shared = Path(tempfile.mkdtemp(prefix="rogacr-", dir="/tmp"))
    shared.chmod(0o777)  # a throwaway marker directory, removed after the phase
    return shared


async def _exec_with_secrets(ctx: PhaseContext, shared: Path) -> tuple[dict[str, Any], int, int]:
    """remote_exec with a stdin and an env secret; scan command lines while it runs."""
    env = ctx.env
    marker = shared / f"running-{uuid.uuid4().hex[:8]}"
    release = shared / f"release-{uuid.uuid4().hex[:8]}"
    # it runs until the scan is done (the release file; ~50 s at most, inside the default 60 s exec limit),
    # not for a fixed second the scan of a loaded machine's process list might overrun
    wait = f"i=0; while [ ! -e {release} ] && [ $i -lt 1000 ]; do sleep 0.05; i=$((i+1)); done"
    script = f"touch {marker}; read -r line; {wait}; printf '%s %s' ${{#line}} ${{#DB_PASSWORD}}"
    results: list[dict[str, Any]] = []

    async def run() -> None:
        args = {
            "target": "plain",
            "shell": script,
            "stdin": env.secrets.exec_stdin + "\n",
            "env": {"DB_PASSWORD": env.secrets.exec_env},
        }
        results.append(await env.main.call("remote_exec", args))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)

        async def started() -> bool:
            return marker.exists()

        await wait_until(started, 20, interval_s=0.02)
        lines = await anyio.to_thread.run_sync(_cmdlines)
        await anyio.to_thread.run_sync(release.touch)
    seen_marker = sum(str(marker).encode() in line for line in lines)
    stdin_hits = sum(env.secrets.exec_stdin.encode() in line for line in lines)
    return results[0], seen_marker, stdin_hits


async def _relay_with_secret(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.terminal is not None
    await wait_relay_ok(env)
    name = f"acc-redact-{uuid.uuid4().hex[:8]}"
    socket = env.terminal.socket

    def has_session() -> bool:
        probe = ["tmux", "-L", socket, "has-session", "-t", f"={name}"]
        return subprocess.run(probe, capture_output=True, check=False, timeout=10).returncode == 0

    def kill_session() -> None:
        subprocess.run(
            ["tmux", "-L", socket, "kill-session", "-t", f"={name}"],
            capture_output=True,
            check=False,
            timeout=10,
        )

    ctx.stack.callback(kill_session)
    ctx.created(f"tmux session {name} killed", lambda: not has_session())
    created = structured(await env.main.call("create_session", {"session_name": name}))
    keys = f"# --password={env.secrets.relayed_arg}"
    structured(await env.main.call("send_keys", {"keys": keys, "pane_id": created["active_pane_id"]}))


@phase("redaction", "planted secrets searched in every output (audit, stderr, results, /proc cmdlines)")
async def redaction(ctx: PhaseContext) -> None:
    env = ctx.env
    planted = env.secrets.planted()
    if env.sshd is not None:
        shared = _shared_dir()
        ctx.stack.callback(shutil.rmtree, shared, True)
        ctx.created(f"{shared} removed", lambda: not shared.exists())
        result, seen_marker, stdin_hits = await _exec_with_secrets(ctx, shared)
        out = structured(result)
        want = f"{len(env.secrets.exec_stdin)} {len(env.secrets.exec_env)}"
        ctx.check(out["stdout"] == want, f"the secrets did not arrive: {out['stdout']!r}, want {want!r}")
        ctx.check(seen_marker >= 1, "the process scan did not see the running remote command")
        ctx.check(stdin_hits == 0, f"the stdin secret is in {stdin_hits} process command line(s)")
        ctx.figures["cmdlines_scanned_while_running"] = True
    if env.terminal is not None:
        await _relay_with_secret(ctx)
    outputs = await anyio.to_thread.run_sync(_outputs, env)
    lines = await anyio.to_thread.run_sync(_cmdlines)
    hits: dict[str, list[str]] = {}
    for label, secret in planted.items():
        places = [name for name, text in outputs.items() if secret in text]
        if label != "exec_env":
            places += [f"/proc cmdline ({n})" for n in range(sum(secret.encode() in line for line in lines))]
        if places:
            hits[label] = places
    for gw in env.gateways:
        if gw.token:
            places = [name for name, text in outputs.items() if gw.token in text]
            if places:
                hits[f"bearer token of gateway {gw.proc.pid}"] = places
    ctx.check(not hits, f"secrets found in outputs: {json.dumps(hits)}")

    audit_text = await anyio.to_thread.run_sync(Path(env.gw.info["audit_file"]).read_text)
    main_audit = [json.loads(line) for line in audit_text.splitlines()]
    if env.sshd is not None:
        record = next(
            (
                r
                for r in reversed(main_audit)
                if r.get("tool") == "remote_exec" and "DB_PASSWORD" in json.dumps(r)
            ),
            None,
        )
        ctx.check(record is not None, "no audit record of the secret-bearing remote_exec")
        assert record is not None
        args = record["arguments"]
        ctx.check(args["stdin"]["len"] == len(env.secrets.exec_stdin) + 1, f"stdin digest: {args['stdin']}")
        ctx.check(
            args["env"]["DB_PASSWORD"]["len"] == len(env.secrets.exec_env), f"env digest: {args['env']}"
        )
    if env.terminal is not None:
        relayed = [r for r in main_audit if r.get("tool") == "send_keys"]
        ctx.check(bool(relayed), "no audit record of the relayed send_keys")
        # relayed arguments are digested by default (the upstream's audit_arguments = "digest"): the typed
        # keys are recorded as their length and hash prefix only
        keys_digest = relayed[-1].get("arguments", {}).get("keys")
        keys = f"# --password={env.secrets.relayed_arg}"
        ctx.check(
            isinstance(keys_digest, dict)
            and keys_digest.get("len") == len(keys.encode())
            and keys_digest.get("sha256_prefix") == hashlib.sha256(keys.encode()).hexdigest()[:12],
            f"relayed keys not digested: {relayed[-1]}",
        )
    ctx.figures.update(
        {
            "secrets_planted": len(planted),
            "tokens_searched": sum(1 for gw in env.gateways if gw.token),
            "outputs_searched": len(outputs),
            "bytes_searched": sum(len(text) for text in outputs.values()),
            "processes_scanned": len(lines),
            "audit_records_main": len(main_audit),
            "hits": 0,
            "note": ENV_IN_ARGV,
        }
    )
