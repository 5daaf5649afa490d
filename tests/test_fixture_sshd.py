"""The sshd fixture itself: its stop reads sshd's log to the end before closing the pipe (closing it under
the log pump used to raise in that thread at session end, which the warnings-as-errors suite reports as an
error of whichever test ran last)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.sshd import sshd_unavailable_reason, start_sshd

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


@pytest.fixture
def thread_failures() -> Iterator[list[threading.ExceptHookArgs]]:
    seen: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = seen.append
    try:
        yield seen
    finally:
        threading.excepthook = previous


def test_stopping_sshd_logs_its_last_line_and_leaves_no_thread_failing(
    thread_failures: list[threading.ExceptHookArgs],
) -> None:
    reason = sshd_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="rogsshd-t-", dir="/tmp"))
    base.chmod(0o711)  # sshd reads the authorized keys below it as the login user
    try:
        for round_ in range(3):
            with start_sshd(base / str(round_)) as sshd:
                pid = sshd.pid
                for _ in range(3):  # sshd logs each connection: the pump is busy when the stop comes
                    subprocess.run(
                        ["ssh", "-F", str(sshd.ssh_config), sshd.alias("plain"), "true"],
                        capture_output=True,
                        timeout=30,
                        check=True,
                    )
            names = [t.name for t in threading.enumerate()]
            assert f"sshd-log-{pid}" not in names  # the pump ended (EOF) before the pipe was closed
            assert "Received signal 15; terminating." in sshd.log_path.read_text(errors="replace")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert thread_failures == []
