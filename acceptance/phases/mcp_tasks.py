"""MCP tasks through a gateway of the phase's own over MCP/HTTP, with the Python SDK as the requester of the
``io.modelcontextprotocol/tasks`` extension (2026-07-28): a long ``remote_exec`` is answered with a task
handle, polled to completion with the direct call's result; a client that does not declare the extension
gets the ordinary answer, and so does a relayed tool of the run's gateway (libtmux-mcp offers no tasks: none
is invented for it); ``tasks/cancel`` stops the remote command (checked on the target); across a
gateway restart a remote task completes under the same id with its real exit code while local work is
reported ``failed``; an unknown id is not found; health counts what happened. Figures: the time
to the handle, from the command's end to the client seeing ``completed``, the restart."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from acceptance._registry import PhaseContext, phase
from acceptance.harness.mcp_tasks import CreatedTask, TasksExtension, cancel, get, poll
from acceptance.harness.targets import Gate, marked_processes
from acceptance.phases._util import RELAYED_TOOL, own_gateway_config, shared_dir, wait_relay_ok, wait_until
from acceptance.phases.tasks import _sweep

__all__ = ["mcp_tasks"]

COMMAND = "echo out; echo err >&2; exit 5"


@asynccontextmanager
async def _client(url: str, headers: dict[str, str], *, tasks: bool) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60))
    transport = streamable_http_client(url, http_client=http)
    extensions = [TasksExtension()] if tasks else None
    async with http, Client(transport, extensions=extensions, cache=None) as client:
        yield client


async def _create(client: Client, arguments: dict[str, Any]) -> CreatedTask:
    created = await client.session.call_tool("remote_exec", arguments, allow_claimed=True)
    if not isinstance(created, CreatedTask):
        raise AssertionError(f"a long remote_exec was answered without a task: {created}")
    return created


@phase(
    "mcp_tasks",
    "MCP tasks: task handles, polling, cancel on the target, restart, health",
    needs=("sshd",),
)
async def mcp_tasks(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    root = shared_dir(ctx, "rogamt-") / "tasks"
    gates = shared_dir(ctx, "rogamg-")
    leaked: list[str] = []
    ctx.stack.callback(_sweep, root, leaked)  # after the gateway below has stopped
    ctx.created("no task process or tmux session was left on the target", lambda: not leaked)
    config = own_gateway_config(
        env,
        [{"name": "plain", "host": env.sshd.alias("plain")}],
        tasks={"remote_dir": str(root), "cancel_grace_s": 1.0},
        tools={"toolsets": ["inspect", "execute", "teardown"]},
        mcp_tasks={"threshold_s": 30, "poll_interval_ms": 200},
    )
    gateway = await ctx.stack.enter_async_context(env.restartable_gateway("mcp-tasks", config))
    gw = gateway.gw
    long = {"target": "plain", "shell": COMMAND, "timeout_s": 120}

    # -- a long call becomes a task; its result is the direct call's ------------------------------------
    async with _client(gw.url, gw.headers(), tasks=True) as c:
        started = time.perf_counter()
        created = await _create(c, long)
        handle_ms = (time.perf_counter() - started) * 1000
        done = await poll(c, created.task_id)
    async with _client(gw.url, gw.headers(), tasks=False) as plain:
        direct = (await plain.call_tool("remote_exec", long)).structured_content or {}
    ctx.check(done["status"] == "completed", f"the task ended {done['status']}: {done}")
    got = done["result"]["structuredContent"]
    keys = ("exit_code", "stdout", "stderr", "signal", "timed_out")
    ctx.check(all(got[k] == direct.get(k) for k in keys), f"task result {got} is not the direct one {direct}")
    ctx.check((got["exit_code"], got["stdout"]) == (5, "out\n"), f"the task's result: {got}")

    # -- a relayed tool is passed through: libtmux-mcp offers no tasks, so no task is invented for it ---
    await wait_relay_ok(env)  # an earlier phase may have left the upstream reconnecting
    async with _client(env.gw.url, env.gw.headers(), tasks=True) as c:
        relayed = await c.session.call_tool(RELAYED_TOOL, {}, allow_claimed=True)
    ctx.check(
        not isinstance(relayed, CreatedTask) and getattr(relayed, "is_error", None) is False,
        f"a relayed tool asked with the extension declared was not an ordinary relayed call: {relayed}",
    )

    # -- cancel: the remote command is stopped, checked on the target -----------------------------------
    victim_gate, gate = Gate(gates, "victim"), Gate(gates, "hold")  # one gate per reader
    ctx.stack.callback(gate.close)
    ctx.stack.callback(victim_gate.close)

    async def up() -> bool:  # the command runs on the target (its task marker is in a process's environ)
        return bool(marked_processes(root))

    async with _client(gw.url, gw.headers(), tasks=True) as c:
        started = time.perf_counter()
        victim = await _create(c, {**long, "shell": f"echo up; {victim_gate.shell()}"})
        warm_ms = (time.perf_counter() - started) * 1000  # the target's master and tmux already up
        await wait_until(up, 20)
        before = len(marked_processes(root))
        started = time.perf_counter()
        await cancel(c, victim.task_id)
        cancel_ms = (time.perf_counter() - started) * 1000
        after = marked_processes(root)
        cancelled = await get(c, victim.task_id)
    ctx.check(
        before > 0 and after == [], f"processes of the cancelled command: {before} before, {after} after"
    )
    ctx.check(cancelled["status"] == "cancelled", f"after tasks/cancel the task is {cancelled}")

    # -- restart: the remote task completes under its id with its exit code; local work is failed --------
    async with _client(gw.url, gw.headers(), tasks=True) as c:
        held = await _create(c, {**long, "shell": f"echo held; {gate.shell()}; exit 9", "timeout_s": 300})
        other_gate = Gate(gates, "other")  # one gate per reader: a release wakes exactly one
        ctx.stack.callback(other_gate.close)
        started_other = {"target": "plain", "shell": other_gate.shell()}
        other = (await c.call_tool("task_start", started_other)).structured_content
        assert other is not None
        waiting = await c.session.call_tool(
            "task_wait", {"task_id": other["id"], "timeout_s": 300}, allow_claimed=True
        )
    ctx.check(isinstance(waiting, CreatedTask), f"task_wait was not answered with a task: {waiting}")
    assert isinstance(waiting, CreatedTask)
    gw, restart_s = await gateway.restart()
    async with _client(gw.url, gw.headers(), tasks=True) as c:
        kept = await get(c, held.task_id)
        local = await get(c, waiting.task_id)
        gate.release()
        other_gate.release()
        released = time.perf_counter()
        finished = await poll(c, held.task_id)
        seen_ms = (time.perf_counter() - released) * 1000
        try:
            await get(c, "mt-" + "0" * 32)
            unknown = None
        except MCPError as exc:
            unknown = exc.error.code
        health = (await c.call_tool("gateway_health", {})).structured_content or {}
    ctx.check(kept["status"] == "working", f"after the restart the remote task is {kept}")
    result = finished.get("result", {}).get("structuredContent", {})
    ctx.check(
        (finished["status"], result.get("exit_code")) == ("completed", 9), f"after the restart: {finished}"
    )
    ctx.check(local["status"] == "failed", f"local work after a restart must be failed, is {local}")
    ctx.check(unknown == -32602, f"an unknown task id got {unknown}, not -32602")
    section = health.get("mcp_tasks", {})
    want = {"completed": 2, "cancelled": 1, "failed": 1}
    ctx.check(section.get("by_status") == want, f"gateway_health.mcp_tasks: {section}, want {want}")
    ctx.figures.update(
        {
            "handle_ms": round(handle_ms, 1),
            "handle_warm_ms": round(warm_ms, 1),
            "cancel_ms": round(cancel_ms, 1),
            "release_to_completed_ms": round(seen_ms, 1),
            "gateway_restart_s": round(restart_s, 2),
            "health": section.get("by_status"),
        }
    )
