"""Start-up benchmark: from spawn to the ``initialize`` answer over stdio.

Run from the repository root::

    .venv/bin/python -m acceptance.bench_startup [--runs N] [--json] [--json-out FILE] [--no-peer]
        [--no-upstream]

stdio MCP clients spawn the gateway once per session, so this is the wait a user sees before the first tool
list. Each run starts a fresh process with a pipe on stdin and stdout, writes one ``initialize`` request
(protocol 2025-11-25) and stops the clock when the complete answer line arrives; then stdin is closed and the
process must exit by itself (bounded; terminated, killed and reaped otherwise). Rows:

* ``gateway serve --stdio``: ``remoteops-gateway`` (the console script of this venv) with a configuration of
  no targets and no upstreams on a temporary state directory;
* ``gateway imports only``: a Python process that imports what ``serve --stdio`` imports and exits (the
  rest of the gateway row is configuration, runtime start and the first answer);
* ``SDK import floor``: a Python process that only imports the MCP SDK's low-level server and stdio
  transport and exits (no answer: this is what any server built on the SDK pays before it can read a byte);
* ``libtmux-mcp (peer)``: the installed libtmux-mcp (FastMCP) answering the same ``initialize`` over stdio.

With libtmux-mcp installed (and without ``--no-upstream``), the rows a stdio client of a gateway with an
upstream waits for: from spawn to the answer of the first ``tools/list`` (after ``initialize`` and
``notifications/initialized``), which holds the relayed tools:

* ``first tools/list: gateway alone`` (no upstream configured), ``libtmux-mcp alone`` (spawned directly);
* ``gateway + libtmux-mcp upstream``: the gateway with libtmux-mcp as a stdio upstream, through the console
  script (the upstream is spawned before the gateway's imports: ``gateway._early``); the answer must hold
  libtmux-mcp's ``list_sessions``;
* ``... upstream spawned after the imports``: the same, entered through ``gateway.cli.main`` (no early
  spawn: the start-ups one after the other, as before).

The overlap ratio printed is the gateway-with-upstream median over the slower of the two alone (aim ≤ 1.15).

Runs are interleaved (gateway, imports, floor, peer, gateway, ...) so drift hits every row alike. The
temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from acceptance.harness.gateway_proc import write_config

__all__ = ["Sample", "main", "spawn_to_exit", "spawn_to_initialize", "spawn_to_tools"]

RUNS = 10
_ANSWER_S = 120.0  # a ceiling: the gateway answers in ~1-2 s here, several times that when loaded
_EXIT_S = 5.0

ROW_GATEWAY = "gateway serve --stdio"
ROW_IMPORTS = "gateway imports only (no answer)"
ROW_FLOOR = "SDK import floor (no answer)"
ROW_PEER = "libtmux-mcp (peer, FastMCP)"
ROW_TOOLS_GATEWAY = "first tools/list: gateway alone"
ROW_TOOLS_UPSTREAM = "first tools/list: libtmux-mcp alone"
ROW_TOOLS_BOTH = "first tools/list: gateway + libtmux-mcp upstream"
ROW_TOOLS_SEQUENTIAL = "first tools/list: gateway + libtmux-mcp upstream spawned after the imports"
RELAYED_TOOL = "list_sessions"

INITIALIZE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench_startup", "version": "0"},
            },
        }
    )
    + "\n"
).encode()


INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
TOOLS_LIST = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n'


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Close stdin, let the process exit on EOF (bounded), else terminate → wait → kill → reap."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=_EXIT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=_EXIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=_EXIT_S)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


class _Lines:
    """The child's stdout as lines, each within the time left to ``deadline`` (nothing read is lost)."""

    def __init__(self, proc: subprocess.Popen[bytes], ceiling_s: float) -> None:
        assert proc.stdout is not None
        self._proc = proc
        self._fd = proc.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._buf = b""
        self._deadline = time.monotonic() + ceiling_s

    def next(self) -> bytes:
        with selectors.DefaultSelector() as sel:
            sel.register(self._fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no answer in time")
                if not sel.select(left):
                    continue
                chunk = os.read(self._fd, 65536)
                if not chunk:
                    raise EOFError(f"stdout closed before an answer (exit {self._proc.poll()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def answer(self, request_id: int) -> dict[str, object]:
        """The answer to ``request_id`` (notifications and other messages before it are skipped)."""
        while True:
            message = json.loads(self.next())
            if isinstance(message, dict) and message.get("id") == request_id:
                if "result" not in message:
                    raise RuntimeError(f"an error answer: {message!r}")
                return message


@dataclass(frozen=True)
class Sample:
    wall_ms: float
    """From spawn to the answer (or, without one, to the exit): what the user waits."""
    cpu_ms: float
    """The child's user + system CPU time over its whole life: steadier than wall time on a busy machine."""


def _children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def spawn_to_initialize(argv: Sequence[str], env: dict[str, str] | None = None) -> Sample:
    """Spawn ``argv``, time the complete ``initialize`` answer on its stdout, reap it (children run one at a
    time, so the RUSAGE_CHILDREN delta is this child's)."""
    cpu_before = _children_cpu_ms()
    wall = _spawn_to_initialize_ms(argv, env)
    return Sample(wall, _children_cpu_ms() - cpu_before)


def _spawn_to_initialize_ms(
    argv: Sequence[str], env: dict[str, str] | None, *, tools: bool = False, expect: str | None = None
) -> float:
    """Milliseconds from spawn to the ``initialize`` answer (``tools``: to the first ``tools/list``
    answer, sent after ``notifications/initialized``, which must name ``expect`` when given)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        lines = _Lines(proc, _ANSWER_S)
        lines.answer(1)
        if not tools:
            return (time.perf_counter() - started) * 1000
        proc.stdin.write(INITIALIZED + TOOLS_LIST)
        proc.stdin.flush()
        result = lines.answer(2)["result"]
        elapsed = (time.perf_counter() - started) * 1000
        listed = result.get("tools", []) if isinstance(result, dict) else []
        names = {tool.get("name") for tool in listed if isinstance(tool, dict)}
        if expect is not None and expect not in names:
            raise RuntimeError(f"the first tools/list lacks {expect!r} ({len(names)} tools)")
        return elapsed
    finally:
        _reap(proc)


def spawn_to_tools(
    argv: Sequence[str], env: dict[str, str] | None = None, *, expect: str | None = None
) -> Sample:
    """Spawn ``argv``, time its first ``tools/list`` answer (after ``initialize`` and
    ``notifications/initialized``); ``expect``: a tool name the list must hold. Reaped as above."""
    cpu_before = _children_cpu_ms()
    wall = _spawn_to_initialize_ms(argv, env, tools=True, expect=expect)
    return Sample(wall, _children_cpu_ms() - cpu_before)


def spawn_to_exit(argv: Sequence[str]) -> Sample:
    cpu_before = _children_cpu_ms()
    started = time.perf_counter()
    subprocess.run(argv, check=True, timeout=_ANSWER_S, stdin=subprocess.DEVNULL)
    return Sample((time.perf_counter() - started) * 1000, _children_cpu_ms() - cpu_before)


def _gateway_argv(work: Path) -> list[str]:
    cfg = write_config(work / "gateway.toml", {"state_dir": str(work / "state")})
    script = Path(sys.executable).with_name("remoteops-gateway")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "gateway"]
    return [*command, "--config", str(cfg), "serve", "--stdio"]


# The gateway entered past its launcher: no early spawn (and the optional imports not kept out).
_LATE_ARGV = [sys.executable, "-c", "import sys; from gateway.cli import main; raise SystemExit(main())"]


def _upstream_configs(
    work: Path, upstream: Sequence[str], env: dict[str, str]
) -> tuple[list[str], list[str]]:
    """argv of the gateway with libtmux-mcp as its stdio upstream: through the launcher, and past it."""
    (work / "state-up").mkdir(exist_ok=True)
    cfg = write_config(
        work / "gateway-upstream.toml",
        {
            "state_dir": str(work / "state-up"),
            "upstreams": [
                {
                    "connection": {
                        "name": "tmux",
                        "transport": "stdio",
                        "command": list(upstream),
                        "env": env,
                        # the list waits for the upstream however loaded the machine (default: 5 s)
                        "first_list_wait_s": 120.0,
                        "connect_timeout_s": 120.0,
                    }
                }
            ],
        },
    )
    script = Path(sys.executable).with_name("remoteops-gateway")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "gateway"]
    tail = ["--config", str(cfg), "serve", "--stdio"]
    return [*command, *tail], [*_LATE_ARGV, *tail]


FLOOR_ARGV = [sys.executable, "-c", "import mcp.server.lowlevel.server, mcp.server.stdio"]
IMPORTS_ARGV = [
    sys.executable,
    "-c",
    "import gateway.cli, gateway.serving.serve, gateway._runtime, gateway.tools",
]


def _peer() -> tuple[list[str], dict[str, str]] | None:
    script = Path(sys.executable).with_name("libtmux-mcp")
    if not script.exists():
        return None
    env = {
        **os.environ,
        "FASTMCP_SHOW_SERVER_BANNER": "false",
        "LIBTMUX_SOCKET": f"bench-startup-{os.getpid()}",
    }
    return [str(script)], env


def _summary(samples: list[Sample]) -> dict[str, float]:
    ordered = sorted(s.wall_ms for s in samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median_ms": statistics.median(ordered),
        "p95_ms": p95,
        "min_ms": ordered[0],
        "cpu_median_ms": statistics.median(s.cpu_ms for s in samples),
        "runs": len(samples),
    }


def run(
    runs: int, *, peer: bool = True, upstream: bool = True, warmup: bool = True
) -> dict[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        gateway = _gateway_argv(work)
        subjects: dict[str, Callable[[], Sample]] = {
            ROW_GATEWAY: lambda: spawn_to_initialize(gateway),
            ROW_IMPORTS: lambda: spawn_to_exit(IMPORTS_ARGV),
            ROW_FLOOR: lambda: spawn_to_exit(FLOOR_ARGV),
        }
        found = _peer() if peer or upstream else None
        if found is not None and peer:
            argv, env = found
            subjects[ROW_PEER] = lambda: spawn_to_initialize(argv, env)
        if found is not None and upstream:
            up_argv, up_env = found
            own = {k: up_env[k] for k in ("FASTMCP_SHOW_SERVER_BANNER", "LIBTMUX_SOCKET")}
            both, late = _upstream_configs(work, up_argv, own)
            subjects[ROW_TOOLS_GATEWAY] = lambda: spawn_to_tools(gateway)
            subjects[ROW_TOOLS_UPSTREAM] = lambda: spawn_to_tools(up_argv, up_env, expect=RELAYED_TOOL)
            subjects[ROW_TOOLS_BOTH] = lambda: spawn_to_tools(both, expect=RELAYED_TOOL)
            subjects[ROW_TOOLS_SEQUENTIAL] = lambda: spawn_to_tools(late, expect=RELAYED_TOOL)
        for measure in subjects.values() if warmup else ():  # warm the page cache and __pycache__ once
            measure()
        samples: dict[str, list[Sample]] = {name: [] for name in subjects}
        for _ in range(runs):
            for name, measure in subjects.items():
                samples[name].append(measure())
        return {name: _summary(values) for name, values in samples.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed first spawn of each subject (smoke runs)"
    )
    parser.add_argument("--json-out", type=Path, metavar="FILE", help="also write the rows as JSON to FILE")
    parser.add_argument("--no-peer", action="store_true", help="skip the libtmux-mcp row")
    parser.add_argument(
        "--no-upstream", action="store_true", help="skip the first-tools/list rows (gateway with libtmux-mcp)"
    )
    args = parser.parse_args(argv)
    rows = run(args.runs, peer=not args.no_peer, upstream=not args.no_upstream, warmup=not args.no_warmup)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"spawn → initialize answer over stdio, {args.runs} interleaved runs each")
    print("| subject | median ms | p95 ms | min ms | CPU ms (median) |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['median_ms']:.0f} | {row['p95_ms']:.0f} | {row['min_ms']:.0f} "
            f"| {row['cpu_median_ms']:.0f} |"
        )
    ratio = overlap_ratio(rows)
    if ratio is not None:
        print(f"\ngateway + upstream over the slower alone (median): {ratio:.2f}x (aim <= 1.15)")
    return 0


def overlap_ratio(rows: dict[str, dict[str, float]]) -> float | None:
    """The first tools/list of the gateway with its upstream over the slower of the two alone (medians)."""
    if ROW_TOOLS_BOTH not in rows:
        return None
    alone = max(rows[ROW_TOOLS_GATEWAY]["median_ms"], rows[ROW_TOOLS_UPSTREAM]["median_ms"])
    return rows[ROW_TOOLS_BOTH]["median_ms"] / alone


if __name__ == "__main__":
    raise SystemExit(main())
