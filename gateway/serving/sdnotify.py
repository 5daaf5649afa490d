"""systemd's notify-socket protocol (sd_notify), without libsystemd.

``READY=1`` once serving, ``WATCHDOG=1`` at half of ``WATCHDOG_USEC`` only while the caller's health
check passes, ``STATUS=…`` free text, ``STOPPING=1`` on shutdown. Without ``NOTIFY_SOCKET`` every call is
a no-op, so the same code runs under systemd and in a terminal.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

__all__ = ["Notifier"]


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None) -> None:
        self._address = address
        self.watchdog_interval_s = watchdog_usec / 2_000_000 if watchdog_usec else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        if raw and raw.isdigit() and int(raw) > 0 and (not pid or pid == str(os.getpid())):
            usec = int(raw)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *fields: str) -> bool:
        """Send one datagram of newline-separated fields; False when there is no socket or it failed."""
        if self._address is None:
            return False
        address = self._address
        if address.startswith("@"):  # abstract namespace
            address = "\0" + address[1:]
        message = "\n".join(fields)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)
                sock.sendto(message.encode("utf-8"), address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def stopping(self, status: str = "stopping") -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")
