"""Start-up benchmark: from spawn to the ``initialize`` answer over stdio.

Run from the repository root::

    .venv/bin/python -m acceptance.bench_startup [--runs N] [--json] [--no-peer]

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

__all__ = ["Sample", "main", "spawn_to_exit", "spawn_to_initialize"]

RUNS = 10
_ANSWER_S = 120.0  # a ceiling: the gateway answers in ~1-2 s here, several times that when loaded
_EXIT_S = 5.0

ROW_GATEWAY = "gateway serve --stdio"
ROW_IMPORTS = "gateway imports only (no answer)"
ROW_FLOOR = "SDK import floor (no answer)"
ROW_PEER = "libtmux-mcp (peer, FastMCP)"

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


def _read_line(proc: subprocess.Popen[bytes], ceiling_s: float) -> bytes:
    """One line from the child's stdout, within ``ceiling_s`` (raises TimeoutError / EOFError)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = b""
    deadline = time.monotonic() + ceiling_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {ceiling_s} s")
            if not sel.select(left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError(f"stdout closed before an answer (exit {proc.poll()})")
            buf += chunk
    return buf.split(b"\n", 1)[0]


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


def _spawn_to_initialize_ms(argv: Sequence[str], env: dict[str, str] | None) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        answer = json.loads(_read_line(proc, _ANSWER_S))
        elapsed = (time.perf_counter() - started) * 1000
        if answer.get("id") != 1 or "result" not in answer:
            raise RuntimeError(f"not an initialize answer: {answer!r}")
        return elapsed
    finally:
        _reap(proc)


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


def run(runs: int, *, peer: bool = True) -> dict[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        gateway = _gateway_argv(work)
        subjects: dict[str, Callable[[], Sample]] = {
            ROW_GATEWAY: lambda: spawn_to_initialize(gateway),
            ROW_IMPORTS: lambda: spawn_to_exit(IMPORTS_ARGV),
            ROW_FLOOR: lambda: spawn_to_exit(FLOOR_ARGV),
        }
        found = _peer() if peer else None
        if found is not None:
            argv, env = found
            subjects[ROW_PEER] = lambda: spawn_to_initialize(argv, env)
        for measure in subjects.values():  # warm the page cache and __pycache__ once
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
    parser.add_argument("--no-peer", action="store_true", help="skip the libtmux-mcp row")
    args = parser.parse_args(argv)
    rows = run(args.runs, peer=not args.no_peer)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
