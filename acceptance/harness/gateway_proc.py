"""Run the real gateway as a subprocess (``remoteops-gateway serve --http``, or another HTTP-serving command
such as ``demo``) for HTTP tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from acceptance.harness import starts

__all__ = ["GatewayProcess", "run_gateway", "write_config"]


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[bytes]
    url: str
    port: int
    token: str | None
    state_dir: Path
    stderr_path: Path
    info: dict[str, Any]
    banner: str = ""
    """stderr as it stood once the gateway was ready (what it printed on start)."""
    exit_code: int | None = None
    """Set on leaving ``run_gateway``: the exit status after SIGTERM (negative: killed by that signal)."""

    @property
    def pid(self) -> int:
        """The pid the gateway reported in its ready file."""
        return int(self.info["pid"])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait_stderr(self, ready: Callable[[str], bool], ceiling_s: float = 10.0) -> str:
        """stderr once ``ready(text)`` holds (else TimeoutError). The gateway writes its log lines from a
        writer thread, a moment after the answer they belong to: a test that looks for one waits for it."""
        deadline = time.monotonic() + ceiling_s
        while not ready(text := self.stderr_text()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateway stderr did not show what was awaited within {ceiling_s} s")
            time.sleep(0.02)  # another process's file: there is no event to wait on
        return text

    async def stderr_when(self, ready: Callable[[str], bool], ceiling_s: float = 10.0) -> str:
        """:meth:`wait_stderr` off the event loop."""
        return await anyio.to_thread.run_sync(self.wait_stderr, ready, ceiling_s)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):  # an inline table (headers, env of an upstream connection)
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def write_config(path: Path, sections: Mapping[str, Any]) -> Path:
    """Write a small TOML file: top-level scalars, ``[section]`` tables and ``[[array]]`` tables."""
    lines: list[str] = []
    for key, value in sections.items():
        if not isinstance(value, (dict, list)) or (isinstance(value, list) and not value):
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in sections.items():
        if isinstance(value, dict):
            lines.append(f"[{key}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in value.items() if not isinstance(v, dict))
            for k, v in value.items():
                if isinstance(v, dict):
                    lines.append(f"[{key}.{k}]")
                    lines.extend(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                lines.append(f"[[{key}]]")
                scalars = {k: v for k, v in item.items() if not isinstance(v, dict)}
                lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
                for k, v in item.items():
                    if isinstance(v, dict):
                        lines.append(f"[{key}.{k}]")
                        lines.extend(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@starts("gateway")
@contextmanager
def run_gateway(
    workdir: Path,
    config: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    command: tuple[str, ...] = ("serve", "--http"),
    extra_args: tuple[str, ...] = (),
    startup_timeout_s: float = 120.0,
    stop_timeout_s: float = 60.0,
) -> Iterator[GatewayProcess]:
    """Start the gateway over HTTP on a free loopback port; SIGTERM and reap it afterwards.

    ``command`` is the subcommand (``--port 0 --ready-file ...`` and ``extra_args`` follow it). On leaving,
    the yielded ``GatewayProcess.exit_code`` holds how it exited: a gateway that did not stop within
    ``stop_timeout_s`` of SIGTERM is killed (exit code ``-9``).
    """
    state_dir = workdir / "state"
    cfg: dict[str, Any] = {"state_dir": str(state_dir), **(config or {})}
    cfg_path = write_config(workdir / "gateway.toml", cfg)
    ready = workdir / "ready.json"
    stderr_path = workdir / "gateway.stderr"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTEOPS_GATEWAY")}
    full_env.update(env or {})
    argv = [
        sys.executable,
        "-m",
        "gateway",
        "--config",
        str(cfg_path),
        *command,
        "--port",
        "0",
        "--ready-file",
        str(ready),
        *extra_args,
    ]
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=full_env
        )
    gw: GatewayProcess | None = None
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"gateway exited {proc.returncode}: {stderr_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"gateway not ready in {startup_timeout_s}s: {stderr_path.read_text()[-4000:]}"
                )
            time.sleep(0.02)
        info = json.loads(ready.read_text(encoding="utf-8"))
        token = None
        if info.get("token_file"):
            token = Path(info["token_file"]).read_text(encoding="utf-8").strip()
        banner = stderr_path.read_text(encoding="utf-8", errors="replace")
        gw = GatewayProcess(proc, info["url"], info["port"], token, state_dir, stderr_path, info, banner)
        yield gw
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        if gw is not None:
            gw.exit_code = proc.returncode
