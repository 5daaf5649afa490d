"""The run environment every phase shares: a throwaway OpenSSH sshd, libtmux-mcp over HTTP (killable and
restartable on a fixed port) and the gateway as a subprocess over HTTP with bearer auth, plus the planted
secrets and the record of every output the run produced (for the redaction phase).

Everything is started under one private directory (``/tmp/rogacc-*``) and torn down in reverse order; the
runner verifies afterwards that each process is gone and each directory removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio

from acceptance._mcp import GatewayClient
from acceptance.harness import libtmux
from acceptance.harness.gateway_proc import GatewayProcess, run_gateway
from acceptance.harness.procs import free_port, stop_process, wait_for_port
from acceptance.harness.sshd import SshdInstance, sshd_unavailable_reason, start_sshd

__all__ = ["Env", "RestartableGateway", "Secrets", "Terminal", "enter_sync", "open_env", "proc_figures"]

T = TypeVar("T")


async def enter_sync(stack: AsyncExitStack, cm: AbstractContextManager[T]) -> T:
    """Enter a blocking context manager in a worker thread; exit it (also in a thread) with the stack."""
    value = await anyio.to_thread.run_sync(cm.__enter__)

    async def leave() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(cm.__exit__, None, None, None)

    stack.push_async_callback(leave)
    return value


@dataclass(frozen=True)
class Secrets:
    """Fresh per run; recognisable, so a hit anywhere in the outputs is unambiguous."""

    exec_stdin: str = field(default_factory=lambda: f"AccStdinSecret-{secrets.token_hex(8)}")
    exec_env: str = field(default_factory=lambda: f"AccEnvSecret-{secrets.token_hex(8)}")
    upstream_token: str = field(default_factory=lambda: f"AccUpstreamToken-{secrets.token_hex(8)}")
    relayed_arg: str = field(default_factory=lambda: f"AccRelayedArg-{secrets.token_hex(8)}")

    def planted(self) -> dict[str, str]:
        return {
            "exec_stdin": self.exec_stdin,
            "exec_env": self.exec_env,
            "upstream_token": self.upstream_token,
            "relayed_arg": self.relayed_arg,
        }


class Terminal:
    """libtmux-mcp over streamable HTTP on a fixed loopback port; ``kill()`` and ``start()`` again."""

    def __init__(self, socket: str, log_path: Path) -> None:
        self.socket = socket
        self.log_path = log_path
        self.port = free_port()
        self.url = libtmux.http_url(self.port)
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: list[int] = []

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, **libtmux.libtmux_env(self.socket)}
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                libtmux.http_argv(self.port), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )

    async def start(self) -> None:
        self.proc = self._spawn()
        self.pids.append(self.proc.pid)
        try:
            await wait_for_port(self.port, self.proc, ceiling_s=libtmux.READY_S)
        except BaseException:
            await self.stop()
            raise

    async def kill(self) -> None:
        """SIGKILL, then reap: the upstream dies without any goodbye."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        await self.stop()

    async def stop(self) -> None:
        if self.proc is not None:
            await anyio.to_thread.run_sync(stop_process, self.proc)
            self.proc = None


class RestartableGateway:
    """A gateway subprocess that can be stopped (SIGTERM, drained, exit status kept) and started again on
    the same state directory and control directory: what an operator's restart or upgrade does.

    Each incarnation has its own work directory (config, ready file, stderr) and is kept in
    ``Env.gateways``, so the run-wide checks (reaped, exit 0) and the redaction search cover every one.
    """

    def __init__(self, env: Env, name: str, config: dict[str, Any]) -> None:
        self._env = env
        self._name = name
        self.state_dir = env.workdir / f"{name}-state"
        self._config = {"log_level": "info", **config, "state_dir": str(self.state_dir)}
        self._stack: ExitStack | None = None
        self._gw: GatewayProcess | None = None
        self.incarnations = 0

    @property
    def gw(self) -> GatewayProcess:
        assert self._gw is not None, "the gateway is not running"
        return self._gw

    async def start(self) -> GatewayProcess:
        assert self._stack is None, "already running"
        self.incarnations += 1
        work = self._env.workdir / f"{self._name}-{self.incarnations}"
        work.mkdir()
        stack = ExitStack()
        try:
            gw = await anyio.to_thread.run_sync(stack.enter_context, run_gateway(work, self._config))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(stack.close)
            raise
        self._stack, self._gw = stack, gw
        self._env.gateways.append(gw)
        return gw

    async def stop(self) -> int | None:
        """SIGTERM, bounded wait (then SIGKILL), reap; the exit status (0 after a clean drain)."""
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(stack.close)
        return self.gw.exit_code

    async def restart(self) -> tuple[GatewayProcess, float]:
        """Stop, then start again on the same state; the new process and the seconds the restart took."""
        started = time.monotonic()
        await self.stop()
        gw = await self.start()
        return gw, time.monotonic() - started


@dataclass
class Env:
    workdir: Path
    quick: bool
    secrets: Secrets
    sshd: SshdInstance | None = None
    sshd_reason: str | None = None
    terminal: Terminal | None = None
    upstream_reason: str | None = None
    gateway: GatewayProcess | None = None
    client: GatewayClient | None = None
    seen: list[str] = field(default_factory=list)
    """Every MCP result (wire JSON) and tool output any phase received."""
    gateways: list[GatewayProcess] = field(default_factory=list)
    """Every gateway the run started (stderr and audit files are searched for secrets)."""
    markers: list[str] = field(default_factory=list)
    """Strings in the command line of every process the run started: none may be left at the end."""
    dirs: list[Path] = field(default_factory=list)
    """Directories the run made outside ``workdir``; removed (and checked) when the run ends."""

    @property
    def main(self) -> GatewayClient:
        assert self.client is not None
        return self.client

    @property
    def gw(self) -> GatewayProcess:
        assert self.gateway is not None
        return self.gateway

    def targets_config(self, control_dir: Path) -> dict[str, Any]:
        assert self.sshd is not None
        sshd = self.sshd
        return {
            "transport": {
                "ssh_config_file": str(sshd.ssh_config),
                "control_dir": str(control_dir),
                "connect_timeout_s": 5,
            },
            "targets": [
                {"name": role, "host": sshd.alias(role)}
                for role in ("plain", "sudo", "badhostkey", "wrongkey", "closed")
            ],
        }

    def upstream_config(self) -> dict[str, Any]:
        assert self.terminal is not None
        conn = {
            "name": "tmux",
            "transport": "http",
            "url": self.terminal.url,
            "headers": {"Authorization": f"Bearer {self.secrets.upstream_token}"},
            "connect_timeout_s": 30,
            "call_wait_s": 1,
            "backoff_initial_s": 0.2,
            "backoff_max_s": 1.0,
        }
        return {"upstreams": [{"connection": conn}]}

    def control_dir(self) -> Path:
        """A short private directory for one gateway's master sockets (ControlPath < 108 bytes)."""
        path = Path(tempfile.mkdtemp(prefix="rogac-", dir="/tmp"))
        path.chmod(0o700)
        self.markers.append(str(path))
        self.dirs.append(path)
        return path

    @asynccontextmanager
    async def extra_gateway(self, name: str, config: dict[str, Any]) -> AsyncIterator[GatewayProcess]:
        """Another gateway subprocess (own state and config) for the length of a phase."""
        work = self.workdir / name
        work.mkdir()
        async with AsyncExitStack() as stack:
            gw = await enter_sync(stack, run_gateway(work, {"log_level": "info", **config}))
            self.gateways.append(gw)
            yield gw

    @asynccontextmanager
    async def restartable_gateway(
        self, name: str, config: dict[str, Any]
    ) -> AsyncIterator[RestartableGateway]:
        """A gateway that the phase may ``restart()`` on the same state (stopped when the phase ends)."""
        gateway = RestartableGateway(self, name, config)
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.stop()

    @asynccontextmanager
    async def client_of(self, gw: GatewayProcess) -> AsyncIterator[GatewayClient]:
        async with GatewayClient(gw.url, gw.headers(), self.seen) as client:
            yield client


def _tmux_reason() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed (ops/test.sh installs it)"
    if not libtmux.LIBTMUX_MCP.exists():
        return f"libtmux-mcp is not installed in this venv ({libtmux.LIBTMUX_MCP})"
    return None


@contextmanager
def _private_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rogacc-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def open_env(quick: bool) -> AsyncIterator[Env]:
    """Start sshd, the terminal upstream and the main gateway; stop and remove all of it on exit."""
    async with AsyncExitStack() as stack:
        env = Env(workdir=await enter_sync(stack, _private_dir()), quick=quick, secrets=Secrets())
        env.markers.append(str(env.workdir))
        # registered first, so it runs last: after every gateway (and its masters) has stopped
        stack.callback(lambda: [shutil.rmtree(path, ignore_errors=True) for path in env.dirs])
        env.sshd_reason = sshd_unavailable_reason()
        if env.sshd_reason is None:
            env.sshd = await enter_sync(stack, start_sshd())
            env.markers += [str(env.sshd.workdir), str(env.sshd.control_dir)]
        env.upstream_reason = _tmux_reason()
        if env.upstream_reason is None:
            socket = await enter_sync(stack, libtmux.tmux_socket("rogacc"))
            env.markers.append(socket)
            env.terminal = Terminal(socket, env.workdir / "libtmux-mcp.log")
            stack.push_async_callback(env.terminal.stop)
            await env.terminal.start()
        config: dict[str, Any] = {"log_level": "info"}
        if env.sshd is not None:
            config.update(env.targets_config(env.control_dir()))
        if env.terminal is not None:
            config.update(env.upstream_config())
        main_dir = env.workdir / "main"
        main_dir.mkdir()
        env.gateway = await enter_sync(stack, run_gateway(main_dir, config))
        env.gateways.append(env.gateway)
        env.client = await stack.enter_async_context(GatewayClient(env.gw.url, env.gw.headers(), env.seen))
        yield env


def proc_figures(pid: int) -> dict[str, int]:
    """Children, open file descriptors and RSS (KiB) of a process, read from /proc."""
    children = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the comm field may hold spaces and parentheses: the ppid is the 2nd field after the last ')'
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children += 1
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return {"children": children, "fds": len(os.listdir(f"/proc/{pid}/fd")), "rss_kb": rss}
