"""Long-running remote tasks through a gateway of the phase's own over MCP/HTTP: output read by cursor
arrives whole (no byte skipped or repeated), ``task_wait`` returns on a regex match and on exit, cancel
escalates INT → TERM → KILL and says which step ended it, a running task survives a gateway restart and is
adopted under the same ID with one remote session, list and health agree; exit → wait latency measured.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from acceptance._mcp import error_code, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.targets import Gate, marked_processes, tmux_sessions
from acceptance.phases._util import ms_figures, own_gateway_config, shared_dir, timed

__all__ = ["tasks"]

LINE = "line-{i}-abcdefghijklmnopqrstuvwxyz0123456789"
CANCEL_GRACE_S = 1.0
READY = "READY port=4711"


def _expected_output(lines: int) -> str:
    return "".join(LINE.format(i=i) + "\n" for i in range(1, lines + 1))


def _printer(lines: int) -> str:
    """Prints ``lines`` lines in bursts of 100 with short pauses: the output grows while it is read."""
    body = LINE.replace("{i}", "$i")
    return (
        f'i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo "{body}"; '
        "[ $((i % 100)) -eq 0 ] && sleep 0.02; done; exit 0"
    )


def _sweep(root: Path, leaked: list[str]) -> None:
    """After the gateway stopped: note (for the cleanup check) and then stop anything of a task still
    alive on the target (task marker in its environment, a tmux session on the tasks' socket)."""
    for session in tmux_sessions(root):
        leaked.append(f"tmux session {session}")
    for pid in marked_processes(root):
        leaked.append(f"pid {pid}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    sock = root / "tmux.sock"
    if sock.exists():
        owner = sock.stat().st_uid
        argv = ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups"]
        subprocess.run(
            [*argv, "tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False, timeout=10
        )


async def _read_all(
    call: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]],
    task_id: str,
    chunk: int,
    ceiling_s: float,
) -> tuple[str, int, list[tuple[int, int]]]:
    """Read the combined stream by cursor until complete; (data, reads made while the task was still
    running, [(offset, next_offset)] of every read)."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    while_running = 0
    since = 0
    with anyio.fail_after(ceiling_s):
        while True:
            out = structured(
                await call("task_output", {"task_id": task_id, "since": since, "max_bytes": chunk})
            )
            parts.append(out["data"])
            spans.append((out["offset"], out["next_offset"]))
            since = out["next_offset"]
            while_running += out["state"] == "running"
            if out["complete"]:
                return "".join(parts), while_running, spans
            if out["returned_bytes"] == 0:  # caught up with a running task: block on the target a little
                structured(await call("task_wait", {"task_id": task_id, "timeout_s": 0.5, "since": since}))


@phase("tasks", "long-running tasks: cursors, waits, cancel steps, restart adoption", needs=("sshd",))
async def tasks(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    parent = shared_dir(ctx, "rogat-")
    root = parent / "tasks"
    gates = shared_dir(ctx, "rogag-")
    leaked: list[str] = []
    ctx.stack.callback(_sweep, root, leaked)  # runs after the gateway below has stopped
    ctx.created("no task process or tmux session was left on the target", lambda: not leaked)
    config = own_gateway_config(
        env,
        [{"name": "plain", "host": env.sshd.alias("plain")}],
        tasks={"remote_dir": str(root), "cancel_grace_s": CANCEL_GRACE_S},
        tools={"toolsets": ["inspect", "execute", "teardown"]},
    )
    gateway = await ctx.stack.enter_async_context(env.restartable_gateway("tasks", config))
    first = gateway.gw
    first_session = await ctx.stack.enter_async_context(AsyncExitStack())  # closed before the restart
    call = (await first_session.enter_async_context(env.client_of(first))).call
    started: list[str] = []

    async def start(script: str) -> dict[str, Any]:
        info = structured(await call("task_start", {"target": "plain", "shell": script}))
        ctx.check(info["state"] == "running", f"task_start returned {info['state']}: {info}")
        started.append(info["id"])
        return info

    # -- output by cursor: every byte once, in order, while the task is still printing ------------------
    lines = ctx.n(1000, 20000)
    printer = await start(_printer(lines))
    chunk = 1999  # odd: chunks end mid-line
    data, while_running, spans = await _read_all(call, printer["id"], chunk, ctx.n(30, 120))
    want = _expected_output(lines)
    ctx.check(
        len(data) == len(want), f"cursor reads returned {len(data)} bytes, the task printed {len(want)}"
    )
    ctx.check(data == want, "cursor reads skipped, repeated or altered bytes")
    contiguous = all(a[1] == b[0] for a, b in itertools.pairwise(spans)) and spans[0][0] == 0
    ctx.check(contiguous, f"a read did not start at the previous next_offset: {spans[:5]}…")
    tail = structured(await call("task_output", {"task_id": printer["id"], "tail": True, "max_bytes": 100}))
    ctx.check(want.endswith(tail["data"]) and tail["returned_bytes"] == 100, f"tail read: {tail}")
    ctx.figures.update(
        {
            "output_bytes": len(want),
            "cursor_reads": len(spans),
            "cursor_reads_while_running": while_running,
            "mode": printer["mode"],
        }
    )

    # -- wait on a regex, then a restart while the task runs: adopted under its ID ----------------------
    gate = Gate(gates, "release")
    ctx.stack.callback(gate.close)
    holder = await start(f"echo booting; sleep 0.2; echo '{READY}'; {gate.shell()}; echo released")
    matched, match_ms = await timed(
        call(
            "task_wait",
            {"task_id": holder["id"], "pattern": "READY port=[0-9]+", "since": 0, "timeout_s": 20},
        )
    )
    got = structured(matched)
    ctx.check(
        (got["outcome"], got["state"], got["matched"]) == ("matched", "running", READY), f"regex wait: {got}"
    )
    sessions_before = tmux_sessions(root) if holder["mode"] == "tmux" else []
    await first_session.aclose()  # the MCP session ends with its gateway
    new_gw, restart_s = await gateway.restart()
    ctx.check(gateway.incarnations == 2 and new_gw.pid != first.pid, "the gateway did not restart")
    ctx.check(first.exit_code == 0, f"the first gateway exited {first.exit_code} on SIGTERM")
    call = (await ctx.stack.enter_async_context(env.client_of(new_gw))).call
    adopted = structured(await call("task_status", {"task_id": holder["id"]}))
    ctx.check(adopted["state"] == "running", f"after the restart the task is {adopted['state']}: {adopted}")
    ctx.check(adopted["session"] == holder["session"], f"another remote session: {holder} → {adopted}")
    if holder["mode"] == "tmux":
        sessions_after = tmux_sessions(root)
        ctx.check(
            sessions_before.count(holder["id"]) == 1 and sessions_after.count(holder["id"]) == 1,
            f"tmux sessions for the task before/after the restart: {sessions_before} / {sessions_after}",
        )
    gate.release()
    done = structured(await call("task_wait", {"task_id": holder["id"], "timeout_s": 20}))
    ctx.check((done["outcome"], done["exit_code"]) == ("exited", 0), f"the adopted task's end: {done}")
    out = structured(await call("task_output", {"task_id": holder["id"]}))
    ctx.check(out["data"] == f"booting\n{READY}\nreleased\n" and out["complete"], f"adopted output: {out}")

    # -- cancel: which step ended it, for a plain, an INT-ignoring and an INT+TERM-ignoring task --------
    scripts = {"INT": "sleep 300", "TERM": "trap '' INT; sleep 300", "KILL": "trap '' INT TERM; sleep 300"}
    victims = {step: await start(f"echo up; {script}") for step, script in scripts.items()}
    for info in victims.values():  # each is really running (its first line printed) before the cancel
        seen = structured(
            await call("task_wait", {"task_id": info["id"], "pattern": "^up$", "since": 0, "timeout_s": 20})
        )
        ctx.check(seen["outcome"] == "matched", f"cancel victim did not start: {seen}")
    cancelled: dict[str, dict[str, Any]] = {}
    cancel_ms: dict[str, float] = {}

    async def cancel(step: str, task_id: str) -> None:
        result, ms = await timed(call("task_cancel", {"task_id": task_id}))
        cancelled[step], cancel_ms[step] = structured(result), ms

    async with anyio.create_task_group() as tg:
        for step, info in victims.items():
            tg.start_soon(cancel, step, info["id"])
    for step, result in cancelled.items():
        ctx.check(
            (result["step"], result["state"], result["session_removed"]) == (step, "cancelled", True),
            f"cancel of the task expected to end at {step}: {result}",
        )
    again = structured(await call("task_cancel", {"task_id": victims["INT"]["id"]}))
    ctx.check(again["step"] == "already_exited", f"a second cancel: {again}")
    gone = await call("task_status", {"task_id": "t-" + "0" * 16})
    ctx.check(error_code(gone) == "not_found", f"an unknown task id: {gone}")

    # -- exit → task_wait latency: the task prints its exit time, the wait is blocked on the target -------
    latencies: list[float] = []
    for _ in range(ctx.n(3, 20)):
        info = await start("sleep 0.2; date +%s.%N")
        waited = structured(await call("task_wait", {"task_id": info["id"], "timeout_s": 20}))
        returned = time.time()
        ctx.check(waited["outcome"] == "exited", f"latency task: {waited}")
        printed = structured(await call("task_output", {"task_id": info["id"]}))["data"].strip()
        latencies.append((returned - float(printed)) * 1000)

    # -- list and health agree with what the phase did --------------------------------------------------
    listed = structured(await call("task_list", {"target": "plain", "limit": 500}))
    ids = {t["id"] for t in listed["tasks"]}
    ctx.check(listed["total"] == len(started) and ids == set(started), f"task_list: {listed['total']} tasks")
    by_state: dict[str, int] = {}
    for task in listed["tasks"]:
        by_state[task["state"]] = by_state.get(task["state"], 0) + 1
    want_states = {"exited": len(started) - len(victims), "cancelled": len(victims)}
    ctx.check(by_state == want_states, f"states in task_list: {by_state}, want {want_states}")
    section = structured(await call("gateway_health", {}))["tasks"]
    ctx.check(
        (section["total"], section["by_state"]) == (len(started), want_states), f"gateway_health: {section}"
    )
    ctx.figures.update(
        {
            "tasks_started": len(started),
            "regex_wait_ms": round(match_ms, 1),
            "gateway_restart_s": round(restart_s, 2),
            "cancel_ms": {step: round(ms, 1) for step, ms in cancel_ms.items()},
            "cancel_grace_s": CANCEL_GRACE_S,
            "health_by_state": section["by_state"],
            **ms_figures("exit_to_wait", latencies),
        }
    )
