"""sd_notify over a real datagram socket."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.serving.sdnotify import Notifier


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    # A private directory: a fixed name (``/tmp/rog-notify-<pid>.sock``) is taken by any socket a crashed
    # earlier run with the same pid left behind, and bind() then fails.
    directory = tempfile.mkdtemp(prefix="rogsd-", dir="/tmp")  # short: AF_UNIX paths end at 108 bytes
    path = f"{directory}/notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30)  # a ceiling only: each datagram is already queued when recv is called
    try:
        yield sock, path
    finally:
        sock.close()
        Path(path).unlink(missing_ok=True)
        os.rmdir(directory)


def test_messages_arrive_on_the_notify_socket(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    n = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"})
    assert n.watchdog_interval_s == 2.0
    assert n.ready("serving")
    assert sock.recv(4096).decode().split("\n")[:2] == ["READY=1", "STATUS=serving"]
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.stopping()
    assert sock.recv(4096).decode().startswith("STOPPING=1")


def test_without_a_socket_nothing_is_sent_and_nothing_fails() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.ready("x") is False
    assert n.watchdog_interval_s is None


def test_a_watchdog_meant_for_another_pid_is_ignored() -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert n.watchdog_interval_s is None
