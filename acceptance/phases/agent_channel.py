"""The persistent per-target agent channel, through a gateway of the phase's own over MCP/HTTP: many
``remote_exec`` calls ride one agent (every command's parent on the target is the same agent process, no
new channel is started), per-call latency against the ssh carrier to the same sshd user in the same run,
an agent killed with -9 on the target is replaced and the next call works, and no agent is left on the
target once the gateway stopped.
"""

from __future__ import annotations

import os
import signal
import statistics
from typing import Any

from acceptance._mcp import structured
from acceptance._registry import PhaseContext, phase
from acceptance.phases._util import ms_figures, own_gateway_config, running, timed, wait_stopped, wait_until

__all__ = ["agent_channel"]

# The command's parent is its call's supervisor (a subreaper the agent forks per call); the agent is the
# supervisor's parent. Under the ssh carrier this is the wrapper's parent, never the agent.
PPID = ["sh", "-c", 'read -r _ _ _ up _ < /proc/$PPID/stat; echo "$up"']
"""The agent starts each argv itself: the command's parent is the agent process."""
AGENT_EXIT_S = 10.0


async def _carrier(call: Any, target: str) -> dict[str, Any]:
    health = structured(await call("gateway_health", {}))
    return dict(health["transport"]["carriers"][target])


@phase("agent_channel", "one persistent agent per target carries many commands", needs=("sshd",))
async def agent_channel(ctx: PhaseContext) -> None:
    env = ctx.env
    assert env.sshd is not None
    host = env.sshd.alias("plain")
    agents: list[int] = []  # every agent pid seen on the target

    async def agents_exited() -> None:  # after the gateway stopped: its agents end when their stdin closes
        ctx.figures["agents_exited_after_stop"] = await wait_stopped(agents, AGENT_EXIT_S)

    ctx.stack.push_async_callback(agents_exited)  # registered before the gateway: runs after it stopped
    ctx.created(
        "no agent process left on the target after its gateway stopped",
        lambda: not any(running(pid) for pid in agents),
    )
    config = own_gateway_config(
        env,
        [
            {"name": "agent", "host": host, "carrier": "agent"},
            {"name": "ssh", "host": host, "carrier": "ssh"},  # the same sshd user: they share one master
        ],
    )
    gw = await ctx.stack.enter_async_context(env.extra_gateway("agent-channel", config))
    client = await ctx.stack.enter_async_context(env.client_of(gw))
    call = client.call

    first, cold_ms = await timed(call("remote_exec", {"target": "agent", "argv": PPID}))
    before = await _carrier(call, "agent")
    ctx.check(
        (before["carrier"], before["agent_alive"], before["channels_started"]) == ("agent", True, 1),
        f"after the first call the agent carrier is not up: {before}",
    )
    agent_pid = before["agent_pid"]
    agents.append(agent_pid)
    ctx.check(int(structured(first)["stdout"]) == agent_pid, f"first command's parent: {first}")

    n = ctx.n(30, 300)
    parents = set()
    for _ in range(n):
        out = structured(await call("remote_exec", {"target": "agent", "argv": PPID}))
        parents.add(int(out["stdout"]))
    after = await _carrier(call, "agent")
    ctx.check(parents == {agent_pid}, f"{n} commands had parents {sorted(parents)}, the agent is {agent_pid}")
    ctx.check(
        (after["agent_pid"], after["channels_started"]) == (agent_pid, 1),
        f"{n} calls started another channel: {before} → {after}",
    )
    ssh_parent = int(structured(await call("remote_exec", {"target": "ssh", "argv": PPID}))["stdout"])
    ctx.check(ssh_parent != agent_pid, "the ssh carrier's command ran under the agent")
    ssh_state = await _carrier(call, "ssh")
    ctx.check(ssh_state["carrier"] == "ssh" and not ssh_state["agent_alive"], f"ssh target: {ssh_state}")

    # per-call latency, interleaved so drift hits both carriers alike
    samples: dict[str, list[float]] = {"agent": [], "ssh": []}
    for i in range(ctx.n(20, 200)):
        for target in ("agent", "ssh") if i % 2 == 0 else ("ssh", "agent"):
            result, ms = await timed(call("remote_exec", {"target": target, "argv": ["true"]}))
            ctx.check(structured(result)["exit_code"] == 0, f"true on {target}: {result}")
            samples[target].append(ms)

    # the agent killed on the target: noticed, and the next call boots a fresh one
    os.kill(agent_pid, signal.SIGKILL)

    async def noticed() -> bool:
        return not (await _carrier(call, "agent"))["agent_alive"]

    noticed_s = await wait_until(noticed, 20, interval_s=0.05)
    again, reboot_ms = await timed(call("remote_exec", {"target": "agent", "argv": PPID}))
    reborn = await _carrier(call, "agent")
    new_pid = reborn["agent_pid"]
    if isinstance(new_pid, int):
        agents.append(new_pid)
    ctx.check(
        (reborn["agent_alive"], reborn["channels_started"]) == (True, 2) and new_pid != agent_pid,
        f"after the kill: {reborn}",
    )
    ctx.check(int(structured(again)["stdout"]) == new_pid, f"the call after the kill ran elsewhere: {again}")
    ctx.check(not running(agent_pid), f"the killed agent {agent_pid} still runs")
    transport = structured(await call("gateway_health", {}))["transport"]

    agent_med, ssh_med = statistics.median(samples["agent"]), statistics.median(samples["ssh"])
    ctx.figures.update(
        {
            "calls_on_one_agent": n + 1,
            "agent_python": before["agent_python"],
            "first_call_cold_ms": round(cold_ms, 1),
            **ms_figures("agent_exec_true", samples["agent"]),
            **ms_figures("ssh_exec_true", samples["ssh"]),
            "agent_vs_ssh_median_ratio": round(agent_med / ssh_med, 2),
            "kill_noticed_s": round(noticed_s, 2),
            "call_after_kill_ms": round(reboot_ms, 1),
            "channels_started": reborn["channels_started"],
            "masters_created": transport["masters_created"],
        }
    )
