"""The OpenSSH command lines remoteops runs, and the classification of ssh's own failures (exit 255).

Options given on the command line win over the ssh configuration, so BatchMode, ConnectTimeout,
ServerAlive* and StrictHostKeyChecking (``yes``, or ``accept-new`` when the target opts in) can never be
weakened by a config file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ._errors import AuthError, ConnectError, ConnectReason, HostKeyError, TransportError, TransportLost
from ._settings import TargetSpec, TransportSettings

__all__ = ["SshArgs", "classify_ssh_failure", "is_mux_presession_failure"]


def _escape_path(path: Path) -> str:
    return str(path).replace("%", "%%")  # ControlPath undergoes %-token expansion


class SshArgs:
    def __init__(self, settings: TransportSettings) -> None:
        self._settings = settings

    def _base(self) -> list[str]:
        argv = [self._settings.ssh_binary]
        if self._settings.ssh_config_file is not None:
            argv += ["-F", str(self._settings.ssh_config_file)]
        return argv

    def _target(self, target: TargetSpec) -> list[str]:
        argv: list[str] = []
        if target.user is not None:
            argv += ["-l", target.user]
        if target.port is not None:
            argv += ["-p", str(target.port)]
        return argv

    def _connect_options(self, target: TargetSpec) -> list[str]:
        s = self._settings
        checking = "accept-new" if target.host_key_policy == "accept-new" else "yes"
        opts = [
            "BatchMode=yes",
            f"ConnectTimeout={s.connect_timeout_s}",
            f"ServerAliveInterval={s.server_alive_interval_s}",
            f"ServerAliveCountMax={s.server_alive_count_max}",
            f"StrictHostKeyChecking={checking}",
            "ClearAllForwardings=yes",
        ]
        return [word for opt in opts for word in ("-o", opt)]

    def resolve(self, target: TargetSpec) -> list[str]:
        return [*self._base(), "-G", *self._target(target), "--", target.host]

    def master(self, target: TargetSpec, control_path: Path, ready_token: str) -> list[str]:
        """A foreground master (our child); prints ``ready_token`` once the control socket listens."""
        return [
            *self._base(), *self._connect_options(target), *self._target(target),
            "-M", "-N", "-n", "-T", "-S", _escape_path(control_path),
            "-o", "ControlMaster=yes", "-o", "ControlPersist=no",
            "-o", "PermitLocalCommand=yes", "-o", f"LocalCommand=echo {ready_token}",
            "--", target.host,
        ]  # fmt: skip

    def control(self, target: TargetSpec, control_path: Path, op: Literal["check", "exit"]) -> list[str]:
        return [
            *self._base(), *self._target(target),
            "-S", _escape_path(control_path), "-O", op, "--", target.host,
        ]  # fmt: skip

    def mux_client(self, target: TargetSpec, control_path: Path, remote: str) -> list[str]:
        """A client of an existing master. ``ProxyCommand=false`` makes ssh's silent fallback to a direct
        connection (taken when the master is gone or refuses the session) fail before any command runs."""
        return [
            *self._base(), *self._connect_options(target), *self._target(target),
            "-T", "-S", _escape_path(control_path), "-o", "ControlMaster=no", "-o", "ProxyCommand=false",
            "--", target.host, remote,
        ]  # fmt: skip

    def oneshot(self, target: TargetSpec, remote: str) -> list[str]:
        return [
            *self._base(), *self._connect_options(target), *self._target(target),
            "-T", "-o", "ControlMaster=no", "-o", "ControlPath=none",
            "--", target.host, remote,
        ]  # fmt: skip


_HOSTKEY_CHANGED = (
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "Host key for",
    "has changed and you have requested",
)
_HOSTKEY_OTHER = ("Host key verification failed", "No ED25519 host key is known", "host key is known for")
_CONNECT: tuple[tuple[str, ConnectReason], ...] = (
    ("Could not resolve hostname", "unknown_host"),
    ("Name or service not known", "unknown_host"),
    ("Connection refused", "refused"),
    ("Connection timed out", "timeout"),
    ("Operation timed out", "timeout"),
    ("No route to host", "no_route"),
    ("Network is unreachable", "no_route"),
    ("kex_exchange_identification", "closed"),
    ("Connection closed by", "closed"),
    ("Connection reset by", "closed"),
)
_MUX_PRESESSION = (
    "Control socket connect(",
    "mux_client_hello_exchange",
    "Master refused session request",
    "session request failed",
)


def is_mux_presession_failure(stderr: str) -> bool:
    """ssh said the multiplexed session was never opened (so no remote command was started through it)."""
    return any(text in stderr for text in _MUX_PRESESSION)


def _last_lines(stderr: str, limit: int = 600) -> str:
    return stderr.strip()[-limit:]


def classify_ssh_failure(
    stderr: str, *, target: str, stage: str, command_started: bool | None
) -> TransportError:
    """Map ssh's exit 255 (before or without the wrapper's end marker) onto the exception tree."""
    detail = _last_lines(stderr)
    if command_started:
        return TransportLost(detail, target=target, stage=stage, command_started=True)
    if any(text in stderr for text in _HOSTKEY_CHANGED):
        return HostKeyError(detail, target=target, stage=stage, reason="changed")
    if any(text in stderr for text in _HOSTKEY_OTHER):
        return HostKeyError(detail, target=target, stage=stage, reason="unknown")
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        return AuthError(detail, target=target, stage=stage)
    for text, reason in _CONNECT:
        if text in stderr:
            return ConnectError(detail, target=target, stage=stage, reason=reason)
    return TransportLost(detail, target=target, stage=stage, command_started=command_started)
