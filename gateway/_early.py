"""Spawn the stdio upstreams first, before the gateway's own imports: the two start-ups overlap.

A stdio client spawns ``serve --stdio`` once per session and waits for its first ``tools/list``, which holds
the relayed tools: the gateway's start-up (~1 s, mostly importing the MCP SDK) and a Python upstream's
(libtmux-mcp: ~1.2 s) used to run one after the other. Here, with the standard library only, the configuration
file is read (``tomllib``: the file ``--config``, ``$REMOTEOPS_GATEWAY_CONFIG`` or the default path name, the
same search as ``gateway.config``), and each stdio upstream is started with its pipes exactly as the
upstream package would start it (argv, the SDK's inherited environment plus the entry's ``env``, ``cwd``, a
session of its own, stderr on a pipe). The gateway hands each live process to its upstream once the
configuration is loaded properly (``gateway._runtime``), and only when the loaded settings would have
spawned exactly the same process (``upstream.SpawnedProcess.matches``); anything else — an entry the full
loader changes or refuses, an upstream toolset that is off, a start-up error of the gateway — ends the
process (SIGTERM to its group, SIGKILL after 2 s, reaped), and the normal path spawns, or reports, as
before. Nothing here raises: a configuration this reader does not understand, or a spawn that fails, means
no early process, and the normal path gives the same error it always gave.

Not done early: when any ``REMOTEOPS_GATEWAY__…`` variable overrides the upstreams or the toolsets (the
full loader decides those), and for ``serve --http`` or ``demo``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EarlyProcess", "EarlyUpstreams", "spawn_early"]

_CONFIG_ENV = "REMOTEOPS_GATEWAY_CONFIG"
_OVERRIDES = ("REMOTEOPS_GATEWAY__UPSTREAMS", "REMOTEOPS_GATEWAY__TOOLS")
# The environment the MCP SDK's stdio_client passes on (mcp.client.stdio.DEFAULT_INHERITED_ENV_VARS, POSIX);
# a mismatch only means the early process is not used.
_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
_GRACE_S = 2.0


@dataclass(eq=False)
class EarlyProcess:
    """One stdio upstream started early: what it was started with, and the process."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str | None
    process: subprocess.Popen[bytes]
    stderr_fd: int
    spawned_at: float
    claimed: bool = False
    """Handed to the upstream package, which owns it from then on."""

    def end(self) -> None:
        """Terminate the unclaimed process's group, kill it after the grace period, reap, close the pipes."""
        if self.claimed:
            return
        self.claimed = True  # ended once
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, 9)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_GRACE_S)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(OSError):
            os.close(self.stderr_fd)


@dataclass(eq=False)
class EarlyUpstreams:
    """The early processes by upstream name; ``close`` ends every one nobody claimed."""

    processes: dict[str, EarlyProcess] = field(default_factory=dict)

    def take(self, name: str) -> EarlyProcess | None:
        """The unclaimed early process of upstream ``name`` (marked claimed), or None."""
        found = self.processes.get(name)
        if found is None or found.claimed:
            return None
        found.claimed = True
        return found

    def close(self) -> None:
        for early in self.processes.values():
            early.end()


def _config_path(argv: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """``--config PATH`` (the last one given, as argparse keeps it), else the same search as the loader."""
    path: str | None = None
    for index, word in enumerate(argv):
        if word == "--config" and index + 1 < len(argv):
            path = argv[index + 1]
        elif word.startswith("--config="):
            path = word.split("=", 1)[1]
    if path is not None:
        return Path(path)
    if environ.get(_CONFIG_ENV):
        return Path(environ[_CONFIG_ENV])
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".config")
    default = Path(base) / "remoteops-gateway" / "gateway.toml"
    return default if default.is_file() else None


def _stdio_entries(data: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...], dict[str, str], str | None]]:
    """(name, argv, env, cwd) of each well-formed stdio upstream; anything unexpected is skipped."""
    tools = data.get("tools", {})
    toolsets = tools.get("toolsets") if isinstance(tools, Mapping) else None
    if toolsets is not None and (not isinstance(toolsets, list) or "upstream" not in toolsets):
        return []
    found = []
    entries = data.get("upstreams", [])
    for entry in entries if isinstance(entries, list) else []:
        conn = entry.get("connection") if isinstance(entry, Mapping) else None
        if not isinstance(conn, Mapping) or conn.get("transport") != "stdio":
            continue
        name, command = conn.get("name"), conn.get("command")
        env, cwd = conn.get("env", {}), conn.get("cwd")
        if not isinstance(name, str) or not isinstance(command, list) or not command:
            continue
        if not all(isinstance(word, str) for word in command) or not isinstance(env, Mapping):
            continue
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            continue
        if cwd is not None and not isinstance(cwd, str):
            continue
        found.append((name, tuple(command), dict(env), cwd))
    return found


def _inherited(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: environ[k] for k in _INHERITED if k in environ and not environ[k].startswith("()")}


def _spawn(name: str, argv: tuple[str, ...], env: dict[str, str], cwd: str | None) -> EarlyProcess | None:
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=write_fd,
            env=env,
            cwd=cwd,
            start_new_session=True,
            bufsize=0,
        )
    except (OSError, ValueError, subprocess.SubprocessError):
        os.close(read_fd)
        return None
    finally:
        os.close(write_fd)  # the child holds its end: its exit ends our reader
    return EarlyProcess(name, argv, env, cwd, proc, read_fd, time.monotonic())


def spawn_early(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> EarlyUpstreams:
    """Start the stdio upstreams of ``serve --stdio``'s configuration now (see the module docstring).
    Never raises: whatever cannot be read or started here is left to the normal path."""
    env = os.environ if environ is None else environ
    early = EarlyUpstreams()
    if any(name.startswith(_OVERRIDES) for name in env):
        return early
    path = _config_path(argv, env)
    if path is None:
        return early
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return early
    inherited = _inherited(env)
    for name, command, extra, cwd in _stdio_entries(data):
        if name in early.processes:
            continue  # a duplicate name: the loader refuses the configuration
        started = _spawn(name, command, inherited | extra, cwd)
        if started is not None:
            early.processes[name] = started
    return early
