"""The fault upstream's launcher stands in for the server it has forked: what the supervision tests see of
an upstream process (its exit status, death by signal, its stdio) is the server's own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.upstream.conftest import fault_command

pytestmark = pytest.mark.component  # the fault upstream and its stdlib launcher: our own pieces


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for the zygote's reap counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_gone(pid: int, ceiling_s: float = 10.0) -> bool:
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


@contextlib.contextmanager
def _started(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A stdio fault upstream through its launcher (own session), and its server's pid; reaped after."""
    with subprocess.Popen(
        fault_command("--state-dir", str(tmp_path), "--stdio"),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    ) as proc:
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "pid").exists():
                assert proc.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.02)
            yield proc, int((tmp_path / "pid").read_text())
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def test_the_server_is_its_own_process_and_a_sigkill_of_it_is_the_launchers_death_too(tmp_path: Path) -> None:
    with _started(tmp_path) as (proc, server):
        assert server != proc.pid
        os.kill(server, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL


def test_a_launcher_killed_with_its_process_group_takes_the_server_with_it(tmp_path: Path) -> None:
    with _started(tmp_path) as (proc, server):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_gone(server)


def test_sigterm_reaches_the_server(tmp_path: Path) -> None:
    with _started(tmp_path) as (proc, server):
        proc.terminate()
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert _wait_gone(server)


def test_the_end_of_stdin_ends_the_server_with_its_own_exit_status(tmp_path: Path) -> None:
    with _started(tmp_path) as (proc, server):
        proc.communicate(b"", timeout=30)  # the stdio server's end of input: a clean exit, status 0
        assert proc.returncode == 0
        assert _wait_gone(server)


def test_the_servers_stderr_is_the_launchers_stderr(tmp_path: Path) -> None:
    env = {**os.environ, "FAULT_PLANT": "visible-on-stderr"}
    proc = subprocess.Popen(
        fault_command("--state-dir", str(tmp_path), "--stdio", "--stderr-env", "FAULT_PLANT"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    _, err = proc.communicate(b"", timeout=30)  # the stdio server's end of input: a clean exit
    assert b"visible-on-stderr" in err
    assert proc.returncode == 0
