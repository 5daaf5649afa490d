"""A target whose ``python3`` is too old for the agent (3.7): the loader exits ``EXIT_TOO_OLD`` and the
carrier falls back to ssh (``auto``) or refuses (``agent``). Against a real OpenSSH sshd whose sessions for
ro-plain get a PATH where ``python3`` is a real CPython 3.7.

The sshd fixture's users cannot execute the pyenv interpreters under ``/root`` (0700), so the 3.7 tree is
hard-linked into a throwaway directory they can read (same file system; no copy) and its ``python3`` is a
two-line wrapper that points the dynamic loader at the linked ``libpython3.7m`` (the interpreter's RUNPATH
names the unreadable ``/root`` directory). A second sshd on its own port, using the session fixture's host
key, authorized keys and client key, sets that PATH (``tests/fixtures/sshd.py`` is not changed for it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from remoteops import MissingCapability, RemoteOps, TargetSpec, TransportSettings
from tests.fixtures.procs import free_port
from tests.fixtures.sshd import SSHD_BINARY, SshdInstance, _stop, _wait_listening

pytestmark = [pytest.mark.anyio, pytest.mark.sshd]

PYENV = Path("/root/.pyenv/versions")
ALIAS = "sshd-py37"
# the big parts of the standard library the loader never imports
_SKIP = shutil.ignore_patterns("test", "site-packages", "idlelib", "tkinter", "lib2to3", "__pycache__")


def _python37() -> Path | None:
    found = sorted(PYENV.glob("3.7.*"))
    return found[-1] if found and (found[-1] / "bin" / "python3.7").is_file() else None


def _link_tree(source: Path, destination: Path) -> None:
    """``source`` under ``destination``, files hard-linked (copied where a link is refused)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, destination, ignore=_SKIP, copy_function=link, symlinks=True)


def _python37_bin(python: Path, work: Path) -> Path:
    """A directory holding ``python3``: CPython 3.7, readable and executable by every user."""
    tree = work / "py37"
    (tree / "bin").mkdir(parents=True)
    os.link(python / "bin" / "python3.7", tree / "bin" / "python3.7")
    _link_tree(python / "lib", tree / "lib")
    bin_dir = work / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python3"
    script = f'#!/bin/sh\nLD_LIBRARY_PATH={tree / "lib"} exec {tree / "bin" / "python3.7"} "$@"\n'
    wrapper.write_text(script, encoding="utf-8")
    wrapper.chmod(0o755)
    for path in [work, *work.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return bin_dir


@dataclass(frozen=True)
class OldPythonTarget:
    ssh_config: Path
    control_dir: Path
    version: str  # what the target's python3 says it is


def _sshd_config(work: Path, sshd: SshdInstance, port: int, path: str) -> str:
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {sshd.workdir / 'host_ed25519'}",
            f"PidFile {work / 'sshd.pid'}",
            f"AuthorizedKeysFile {sshd.workdir / 'authorized_keys'}/%u",
            "UsePAM no",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin no",
            "MaxSessions 10",
            "PrintMotd no",
            f"SetEnv PATH={path}",
            "",
        ]
    )


@pytest.fixture(scope="module")
def old_python(sshd: SshdInstance) -> Iterator[OldPythonTarget]:
    python = _python37()
    if python is None:
        pytest.skip(f"no CPython 3.7 under {PYENV} (the image ships one; ops/test.sh does not install it)")
    work = Path(tempfile.mkdtemp(prefix="rogpy37-", dir="/tmp"))
    control = Path(tempfile.mkdtemp(prefix="rogc37-", dir="/tmp"))
    control.chmod(0o700)
    proc: subprocess.Popen[bytes] | None = None
    try:
        work.chmod(0o755)
        bin_dir = _python37_bin(python, work)
        version = subprocess.run(
            [str(bin_dir / "python3"), "-I", "-S", "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        port = free_port()
        cfg = work / "sshd_config"
        cfg.write_text(_sshd_config(work, sshd, port, f"{bin_dir}:/usr/bin:/bin"), encoding="utf-8")
        proc = subprocess.Popen(
            [str(SSHD_BINARY), "-D", "-e", "-f", str(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if not _wait_listening(proc, work / "sshd.log"):
            pytest.fail(f"the 3.7 sshd did not come up: {(work / 'sshd.log').read_text(errors='replace')}")
        host_key = (sshd.workdir / "host_ed25519.pub").read_text(encoding="utf-8").split()[:2]
        known = work / "known_hosts"
        known.write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n", encoding="utf-8")
        client = work / "ssh_config"
        client.write_text(
            f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {port}\n  User {sshd.users['plain']}\n"
            f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
            "  GlobalKnownHostsFile /dev/null\n",
            encoding="utf-8",
        )
        yield OldPythonTarget(client, control, version)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(control, ignore_errors=True)


def _ops(target: OldPythonTarget, carrier: str) -> RemoteOps:
    settings = TransportSettings.model_validate(
        {"ssh_config_file": target.ssh_config, "control_dir": target.control_dir, "carrier": carrier}
    )
    return RemoteOps(settings, [TargetSpec(name="py37", host=ALIAS)])


async def test_a_target_whose_python3_is_3_7_falls_back_to_ssh_automatically_and_says_why(
    old_python: OldPythonTarget,
) -> None:
    assert old_python.version.startswith("3.7.")
    async with _ops(old_python, "auto") as ops:
        with anyio.fail_after(60):
            seen = await ops.run("py37", ["sh", "-c", "python3 -c 'import sys; print(sys.version_info[:2])'"])
            state = await ops.prepare("py37")  # waits for the agent's boot in the background to end
            after = await ops.exec_raw("py37", ["id", "-un"])
            caps = await ops.capabilities("py37")
        stats = ops.stats()
    assert seen.stdout == "(3, 7)\n"  # the target's python3 really is the old one
    assert state.mode == "auto"
    assert state.carrier == "ssh"
    assert state.agent_alive is False
    assert state.reason is not None
    assert old_python.version in state.reason  # the loader's own verdict, naming the version it found
    assert after.carrier == "ssh"
    assert after.exit_code == 0
    assert caps.tools["python3"] is True  # present, just too old for the agent
    assert caps.carrier == "ssh"
    assert stats.carriers["py37"].channels_started == 0


async def test_carrier_agent_on_a_target_whose_python3_is_3_7_is_missing_capability(
    old_python: OldPythonTarget,
) -> None:
    async with _ops(old_python, "agent") as ops:
        with anyio.fail_after(60), pytest.raises(MissingCapability) as info:
            await ops.run("py37", ["true"])
        state = ops.stats().carriers["py37"]
    assert info.value.target == "py37"
    assert info.value.capability == "python3"
    assert old_python.version in str(info.value)
    assert state.carrier != "agent"
    assert state.channels_started == 0
