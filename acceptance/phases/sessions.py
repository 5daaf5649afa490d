"""Interactive sessions on the target's tmux through gateways over MCP/HTTP: ensure twice is one session, a
prompt without newline is matched on the target, Ctrl-C interrupts, a multi-line paste arrives intact, the
session outlives ``kill -9`` of its gateway and the next gateway reattaches with the same scrollback, close
leaves nothing behind on the target."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from acceptance._env import enter_sync
from acceptance._mcp import GatewayClient, error_code, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.gateway_proc import run_gateway
from acceptance.harness.targets import exit_masters, tmux_as_owner, tmux_sessions
from acceptance.phases._util import ms_figures, timed

__all__ = ["sessions"]

PROMPT = "rog-acc> "


class _Session:
    def __init__(self, client: GatewayClient, name: str) -> None:
        self.client = client
        self.key = {"target": "plain", "name": name}

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return structured(await self.client.call(tool, {**self.key, **arguments}))

    async def run(self, text: str, pattern: str, timeout_s: float = 20) -> dict[str, Any]:
        """Type a line and wait on the target for ``pattern`` in what follows."""
        sent = await self.call("session_send", text=text, enter=True)
        return await self.call(
            "session_wait_for", pattern=pattern, since=sent["cursor_before"], timeout_s=timeout_s
        )


def _config(ctx: PhaseContext, state: Path, root: Path, control_dir: Path) -> dict[str, Any]:
    return {
        "log_level": "info",
        **ctx.env.targets_config(control_dir),
        "state_dir": str(state),
        "sessions": {"remote_dir": str(root), "width": 120, "height": 40},
        "tools": {"toolsets": ["inspect", "execute", "teardown"]},
    }


@phase(
    "sessions", "interactive sessions on the target's tmux: ensure, send, wait_for, restart", needs=("sshd",)
)
async def sessions(ctx: PhaseContext) -> None:
    parent = Path(tempfile.mkdtemp(prefix="rogas-", dir="/tmp"))
    os.chmod(parent, 0o777)  # noqa: S103 - the target's user (another uid) makes the root and a file here
    root, state = parent / "sessions", ctx.env.workdir / "sessions-state"
    ctx.created(f"no session is left on {root}/tmux.sock", lambda: not tmux_sessions(root))
    ctx.created(f"the sessions root {parent} is removed", lambda: not parent.exists())
    try:
        # The first gateway is killed with -9 (its exit status cannot be the clean 0 the run checks for
        # its own gateways): started here, its masters stopped by the phase, its directories registered.
        control = ctx.env.control_dir()
        work = ctx.env.workdir / "sessions-a"
        work.mkdir()
        async with AsyncExitStack() as stack:
            first = await enter_sync(stack, run_gateway(work, _config(ctx, state, root, control)))
            async with ctx.env.client_of(first) as client:
                s = _Session(client, "acc")
                made, created_ms = await timed(client.call("session_ensure", s.key))
                again, reattach_ms = await timed(client.call("session_ensure", s.key))
                made, again = structured(made), structured(again)
                ctx.check((made["outcome"], again["outcome"]) == ("created", "reattached"), f"{made} {again}")
                ctx.check(tmux_sessions(root) == ["acc"], f"one remote session: {tmux_sessions(root)}")

                prompt = await s.run(f"PS1='{PROMPT}'", "^rog-acc> $")
                ctx.check(prompt["outcome"] == "matched", f"a prompt without newline: {prompt}")
                samples = []
                for i in range(ctx.n(10, 40)):
                    done, ms = await timed(s.run(f"echo round-{i}", f"^round-{i}$"))
                    ctx.check(done["outcome"] == "matched", f"echo round {i}: {done}")
                    samples.append(ms)

                await s.run("sleep 1000", "^never$", timeout_s=0.5)
                stop = await s.call("session_send", keys=["C-c"])
                back = await s.call("session_wait_for", pattern="^rog-acc> $", since=stop["cursor_before"])
                status = await s.run("echo status=$?", "^status=[0-9]+$")
                ctx.check(back["outcome"] == "matched", f"prompt after Ctrl-C: {back}")
                ctx.check(status["line"] == "status=130", f"Ctrl-C ended the sleep: {status}")

                pasted = parent / "pasted.txt"
                body = "alpha\n\tbeta with a tab\n  'gamma' \"$(delta)\" `eps`\nomega\n"
                await s.run(f"cat > {pasted}", "cat > ")
                await s.call("session_send", text=body)
                closed = await s.call("session_send", keys=["C-d"])
                await s.call("session_wait_for", pattern="^rog-acc> $", since=closed["cursor_before"])
                ctx.check(pasted.read_text() == body, f"the paste arrived intact: {pasted.read_text()!r}")

                marker = await s.run("echo before-kill", "^before-kill$")
                ctx.check(marker["outcome"] == "matched", f"marker: {marker}")
                before = await s.call("session_read", view="scrollback", lines=500)
                read_ms = [
                    (await timed(client.call("session_read", {**s.key, "since": 0, "max_bytes": 4096})))[1]
                    for _ in range(ctx.n(10, 40))
                ]
            first.proc.kill()  # SIGKILL: no shutdown code runs
            await anyio.to_thread.run_sync(first.proc.wait, 30)
            await anyio.to_thread.run_sync(exit_masters, control)
        ctx.check(tmux_sessions(root) == ["acc"], "the session outlives kill -9 of its gateway")
        async with (
            ctx.env.extra_gateway("sessions-b", _config(ctx, state, root, ctx.env.control_dir())) as second,
            ctx.env.client_of(second) as client,
        ):
            s = _Session(client, "acc")
            back_again = await s.call("session_ensure")
            after = await s.call("session_read", view="scrollback", lines=500)
            ctx.check(
                (back_again["outcome"], back_again["adopted"]) == ("reattached", False),
                f"after the restart: {back_again}",
            )
            ctx.check(after["data"] == before["data"], "the same scrollback after the restart")
            closed_result = await s.call("session_close")
            gone = await client.call("session_send", {**s.key, "text": "x"})
            ctx.check(closed_result["outcome"] == "killed", f"close: {closed_result}")
            ctx.check(error_code(gone) == "not_found", f"closed session: {gone}")
            ctx.check(tmux_sessions(root) == [], f"nothing left on the socket: {tmux_sessions(root)}")
        ctx.figures.update(
            {
                "ensure_created_ms": round(created_ms, 2),
                "ensure_reattached_ms": round(reattach_ms, 2),
                **ms_figures("send_to_match", samples),
                **ms_figures("read_stream", read_ms),
                "scrollback_bytes": len(after["data"].encode()),
                "pasted_bytes": len(body.encode()),
            }
        )
    finally:
        if (root / "tmux.sock").exists():
            tmux_as_owner(root, "kill-server")
        shutil.rmtree(parent, ignore_errors=True)
