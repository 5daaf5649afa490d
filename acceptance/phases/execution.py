"""Structured exec: separate stdout/stderr/exit, argv/stdin/env/cwd delivered literally, time limits."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from acceptance._mcp import error_code, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.procs import lingering_processes
from acceptance.phases._util import ms_figures, timed

__all__ = ["structured_exec"]

_GONE_GRACE_S = 5.0
"""How long a process that was just SIGKILLed may take to leave the process table on a loaded machine."""

SLEEP_S = "31.4159"
"""A distinctive duration: the cleanup check finds this very command in the process table."""


@phase("exec", "structured exec (streams, exit, literal argv/stdin/env/cwd, time limit)", needs=("sshd",))
async def structured_exec(ctx: PhaseContext) -> None:
    call = ctx.env.main.call
    out = structured(
        await call("remote_exec", {"target": "plain", "shell": "echo out; echo err >&2; exit 3"})
    )
    ctx.check(
        (out["exit_code"], out["stdout"], out["stderr"]) == (3, "out\n", "err\n"), f"streams/exit: {out}"
    )
    ctx.check(out["timed_out"] is False, "a quick command is not timed out")

    tricky = ["a b", "$(id -u)", "'q'", ";", "`x`", "*", ""]
    out = structured(await call("remote_exec", {"target": "plain", "argv": ["printf", "%s|", *tricky]}))
    ctx.check(out["stdout"] == "".join(f"{t}|" for t in tricky), f"argv not literal: {out['stdout']!r}")

    payload = bytes(range(256)) * 4
    out = structured(
        await call(
            "remote_exec",
            {
                "target": "plain",
                "argv": ["sha256sum"],
                "stdin": base64.b64encode(payload).decode(),
                "stdin_encoding": "base64",
            },
        )
    )
    ctx.check(out["stdout"].split()[0] == hashlib.sha256(payload).hexdigest(), "binary stdin altered")

    env_value = "it's $(not) run; `x`"
    args = {
        "target": "plain",
        "argv": ["sh", "-c", 'printf "%s|%s" "$GREETING" "$(pwd)"'],
        "env": {"GREETING": env_value},
        "cwd": "/tmp",
    }
    out = structured(await call("remote_exec", args))
    ctx.check(out["stdout"] == f"{env_value}|/tmp", f"env/cwd: {out['stdout']!r}")

    both = await call("remote_exec", {"target": "plain", "argv": ["true"], "shell": "true"})
    ctx.check(error_code(both) == "validation_error", f"argv and shell together: {both}")

    limited, limit_ms = await timed(
        call("remote_exec", {"target": "plain", "argv": ["sleep", SLEEP_S], "timeout_s": 1})
    )
    out = structured(limited)
    ctx.check(out["timed_out"] is True and out["remote_killed"] is True, f"time limit: {out}")
    # The target is this machine: the timed-out command must really be gone, not just reported so.
    ctx.created(f"the timed-out remote `sleep {SLEEP_S}` is gone", lambda: _sleep_gone(ctx))
    ctx.check(limit_ms < 10_000, f"a 1 s limit took {limit_ms:.0f} ms")

    samples = []
    for _ in range(ctx.n(20, 200)):
        result, ms = await timed(call("remote_exec", {"target": "plain", "argv": ["true"]}))
        ctx.check(structured(result)["exit_code"] == 0, f"true failed: {result}")
        samples.append(ms)
    ctx.figures.update(
        {
            "calls": len(samples) + 6,
            "time_limit_1s_call_ms": round(limit_ms, 1),
            **ms_figures("exec_true", samples),
        }
    )


def _sleep_gone(ctx: PhaseContext) -> bool:
    """No process runs the timed-out ``sleep`` (one on its way out gets a short grace); what is left is
    named in the phase's figures (pid, state, parent and the parent's command line)."""
    left = lingering_processes(f"sleep\0{SLEEP_S}", grace_s=_GONE_GRACE_S)
    for pid in left:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError as exc:
            ctx.figures.setdefault("left_behind", []).append({"pid": pid, "error": repr(exc)})
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        ppid = fields.get("PPid", "").strip()
        try:
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            parent = "?"
        ctx.figures.setdefault("left_behind", []).append(
            {"pid": pid, "state": fields.get("State", "").strip(), "ppid": ppid, "parent": parent[:300]}
        )
    return not left
