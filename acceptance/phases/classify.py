"""Host-key and authentication failures are classified (closed error codes), and nothing is run."""

from __future__ import annotations

from acceptance._mcp import error_of
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import health, timed

__all__ = ["classification"]

CASES = (
    ("badhostkey", "host_key_error", False),
    ("wrongkey", "auth_error", False),
    ("closed", "connect_error", True),
)


@phase("classification", "host-key, auth and connect failures mapped to error codes", needs=("sshd",))
async def classification(ctx: PhaseContext) -> None:
    env = ctx.env
    runs_before = (await health(env))["transport"]["runs"]
    for target, code, retryable in CASES:
        for tool, args in (
            ("remote_exec", {"target": target, "argv": ["true"]}),
            ("target_capabilities", {"target": target}),
        ):
            result, ms = await timed(env.main.call(tool, args))
            err = error_of(result)
            ctx.check(err is not None, f"{tool} on {target} succeeded: {result}")
            assert err is not None
            ctx.check(err.get("code") == code, f"{tool} on {target}: {err.get('code')} (want {code})")
            ctx.check(
                err.get("retryable") is retryable, f"{tool} on {target}: retryable {err.get('retryable')}"
            )
            ctx.check((err.get("details") or {}).get("target") == target, f"details.target: {err}")
            ctx.figures[f"{target}_{tool}_ms"] = round(ms, 1)
    transport = (await health(env))["transport"]
    ctx.figures["classified"] = len(CASES) * 2
    ctx.figures["failures_counted"] = transport["failures"]
    ctx.figures["runs_counted_during_phase"] = transport["runs"] - runs_before
