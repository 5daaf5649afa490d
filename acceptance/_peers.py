"""Peer MCP servers the benchmarks compare against, each in its own virtualenv under the project cache.

``mcp-proxy`` (PyPI) imports names that ``mcp`` 2.x removed, so it cannot share the project's venv (which
has ``mcp`` 2.3): it gets ``.cache/peers/mcp-proxy-venv`` with ``mcp<2``; pip's cache is ``.cache/pip``. The
venv is built once and reused while its marker file records the same requirement set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["CACHE", "MCP_PROXY_REQUIREMENTS", "ensure_mcp_proxy"]

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
MCP_PROXY_REQUIREMENTS = ("mcp-proxy==0.13.0", "mcp<2")
_MARKER = ".requirements"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_mcp_proxy(*, cache: Path = CACHE, quiet: bool = True, timeout_s: float = 600.0) -> Path:
    """Return the ``mcp-proxy`` executable, building its virtualenv first when missing or stale."""
    venv = cache / "peers" / "mcp-proxy-venv"
    exe = venv / "bin" / "mcp-proxy"
    marker = venv / _MARKER
    wanted = "\n".join(MCP_PROXY_REQUIREMENTS) + "\n"
    if exe.exists() and marker.exists() and marker.read_text(encoding="utf-8") == wanted:
        return exe
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # The base interpreter, not this venv's: the peer venv must not see the project's site-packages.
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True, timeout=timeout_s)
    env = {**os.environ, "PIP_CACHE_DIR": str(cache / "pip"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    argv = [str(_venv_python(venv)), "-m", "pip", "install", *MCP_PROXY_REQUIREMENTS]
    if quiet:
        argv.insert(4, "-q")
    try:
        subprocess.run(
            argv,
            check=True,
            env=env,
            timeout=timeout_s,
            stdout=subprocess.DEVNULL if quiet else None,
            stderr=subprocess.PIPE if quiet else None,
        )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(venv, ignore_errors=True)
        detail = (exc.stderr or b"").decode(errors="replace")[-2000:]
        raise RuntimeError(f"installing {' '.join(MCP_PROXY_REQUIREMENTS)} failed: {detail}") from None
    if not exe.exists():
        raise RuntimeError(f"{exe} missing after install")
    marker.write_text(wanted, encoding="utf-8")
    return exe


if __name__ == "__main__":
    print(ensure_mcp_proxy(quiet=False))
