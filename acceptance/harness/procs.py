"""Helpers for the real processes tests and benchmarks start: loopback ports, bounded stop-and-reap, and
the check that nothing was left behind."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import time
from collections.abc import Collection
from pathlib import Path

import anyio

__all__ = [
    "free_port",
    "lingering_processes",
    "pid_runs",
    "processes_mentioning",
    "stop_process",
    "wait_for_port",
    "wait_gone",
]

LINGER_S = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """terminate → bounded wait → kill → reap."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait(timeout=timeout_s)


async def wait_for_port(port: int, proc: subprocess.Popen[bytes], ceiling_s: float = 60.0) -> None:
    """Poll the port until it accepts connections (bounded; a Python server's imports alone took 7-10 s on
    a loaded 2-core machine)."""
    with anyio.fail_after(ceiling_s):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited early with {proc.returncode}")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


def processes_mentioning(marker: str, *, environ: bool = False) -> list[str]:
    """PIDs (not ours) whose command line, or with ``environ`` also whose environment, holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            blob = (entry / "cmdline").read_bytes()
            if environ:
                blob += (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in blob:
            found.append(entry.name)
    return found


def lingering_processes(
    marker: str, *, environ: bool = False, ignore: Collection[str] = (), grace_s: float = LINGER_S
) -> list[str]:
    """:func:`processes_mentioning` (less ``ignore``), once each process found has had up to ``grace_s`` (in
    all) to exit: one that was just stopped, or sent a signal, may still be on its way out (killed process
    groups, a tmux server's shells). What is still there after the grace is left behind. Blocking."""
    deadline = time.monotonic() + grace_s
    while True:
        found = [pid for pid in processes_mentioning(marker, environ=environ) if pid not in ignore]
        if not found or time.monotonic() >= deadline:
            return found
        for pid in found:
            _wait_exit(int(pid), deadline - time.monotonic())


def _wait_exit(pid: int, timeout_s: float) -> None:
    """Until ``pid`` exited (its pidfd is readable), at most ``timeout_s``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout_s * 1000)))
    finally:
        os.close(fd)


def pid_runs(pid: int) -> bool:
    """``pid`` exists and is not a zombie (PID 1 here may never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in ("Z", "X")


async def wait_gone(pid: int, ceiling_s: float = 15.0) -> None:
    """Until ``pid`` exited (pidfd readiness, no polling), at most ``ceiling_s``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with anyio.fail_after(ceiling_s):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)
