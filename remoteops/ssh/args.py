"""The OpenSSH command lines remoteops runs, and the classification of ssh's own failures (exit 255).

Options given on the command line win over the ssh configuration, so BatchMode, ConnectTimeout,
ServerAlive* and StrictHostKeyChecking (``yes``, or ``accept-new`` when the target opts in) can never be
weakened by a config file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from remoteops._errors import (
    AuthError,
    ConnectError,
    ConnectReason,
    HostKeyError,
    TransportError,
    TransportLost,
    UnresolvedHost,
)
from remoteops._settings import TargetSpec, TransportSettings

__all__ = ["SshArgs", "classify_ssh_failure", "host_key_error", "is_mux_presession_failure", "tail_lines"]


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
# ssh's lines worth keeping from a host-key failure (the banner and the boilerplate around it are dropped)
_HOSTKEY_LINES = (
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "key sent by the remote host is",
    "SHA256:",
    "Offending",
    "ssh-keygen -f",
    "Host key for",
    "host key is known for",
    "Host key verification failed",
)
_KEY_HOST = re.compile(r"(?:Host key for|host key is known for) (\S+)")
_FINGERPRINT = re.compile(r"\b(SHA256:[A-Za-z0-9+/]{43})")
_OFFENDING = re.compile(r"Offending \S+ key in (\S+?):(\d+)\s*$", re.MULTILINE)
_BRACKETED = re.compile(r"^\[(.+)\]:(\d+)$")
_RESOLVE = (
    "Could not resolve hostname",
    "Name or service not known",
    "No address associated with hostname",
    "Temporary failure in name resolution",
)
_RESOLVE_HOST = re.compile(r"Could not resolve hostname (\S+?):")
_CONNECT: tuple[tuple[str, ConnectReason], ...] = (
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


def tail_lines(stderr: str, limit: int = 600) -> str:
    """The last whole lines of ``stderr`` that fit in ``limit`` characters (never a line cut mid-word; a
    single longer line is cut at a word boundary and marked with an ellipsis)."""
    lines = [line.rstrip() for line in stderr.strip().splitlines() if line.strip()]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept and lines:
        head = lines[-1][: limit - 2]
        return (head.rsplit(" ", 1)[0] if " " in head else head) + " …"
    return "\n".join(reversed(kept))


def _keyscan(host: str | None) -> str:
    if host is None:
        return "ssh-keyscan -p PORT HOST"
    m = _BRACKETED.match(host)
    return f"ssh-keyscan -p {m.group(2)} {m.group(1)}" if m else f"ssh-keyscan {host}"


def host_key_error(stderr: str, *, target: str, stage: str, changed: bool) -> HostKeyError:
    """ssh's relevant lines, whole, followed by what to do about it."""
    lines: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if line and line not in lines and any(text in line for text in _HOSTKEY_LINES):
            lines.append(line)
    m = _KEY_HOST.search(stderr)
    host = m.group(1) if m else None
    m = _FINGERPRINT.search(stderr)
    fingerprint = m.group(1) if m else None
    m = _OFFENDING.search(stderr)
    known_file = m.group(1) if m else None
    known_hosts = f"{m.group(1)}:{m.group(2)}" if m else None
    if changed:
        where = f" in {known_hosts}" if known_hosts else ""
        sent = f" ({fingerprint})" if fingerprint else ""
        advice = (
            f"What to do: the host sent a different key{sent} than the one recorded{where}; this is what a "
            "man-in-the-middle attack looks like. Confirm the new fingerprint with the host's administrator "
            "first; only then remove the old entry (the ssh-keygen -R line above) and add the verified key "
            f"(e.g. {_keyscan(host)} >> {known_file or '~/.ssh/known_hosts'}). "
            'host_key_policy = "accept-new" never accepts a changed key.'
        )
    else:
        advice = (
            f"What to do: add the host's key to known_hosts after verifying its fingerprint out of band "
            f"(e.g. {_keyscan(host)} >> ~/.ssh/known_hosts, or the UserKnownHostsFile of your ssh "
            "configuration; compare with ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the host), "
            f'or set host_key_policy = "accept-new" on target {target} while enrolling it '
            "(first contact only)."
        )
    detail = "\n".join([*(lines or [tail_lines(stderr)]), advice])
    return HostKeyError(
        detail,
        target=target,
        stage=stage,
        reason="changed" if changed else "unknown",
        host=host,
        fingerprint=fingerprint,
        known_hosts=known_hosts,
    )


def _unresolved(stderr: str, *, target: str, stage: str) -> UnresolvedHost:
    m = _RESOLVE_HOST.search(stderr)
    host = m.group(1) if m else None
    lines = [line.strip() for line in stderr.splitlines() if any(text in line for text in _RESOLVE)]
    what = f"the host name {host!r}" if host else "the host name"
    advice = (
        f"What to do: {what} does not resolve here; check the target's host (or the HostName the ssh "
        "configuration gives it) and the name service."
    )
    return UnresolvedHost("\n".join([*lines[:3], advice]), target=target, stage=stage, host=host)


def classify_ssh_failure(
    stderr: str, *, target: str, stage: str, command_started: bool | None
) -> TransportError:
    """Map ssh's exit 255 (before or without the wrapper's end marker) onto the exception tree."""
    detail = tail_lines(stderr)
    if command_started:
        return TransportLost(detail, target=target, stage=stage, command_started=True)
    if any(text in stderr for text in _HOSTKEY_CHANGED):
        return host_key_error(stderr, target=target, stage=stage, changed=True)
    if any(text in stderr for text in _HOSTKEY_OTHER):
        return host_key_error(stderr, target=target, stage=stage, changed=False)
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        remedy = (
            f"What to do: the gateway runs ssh without prompts (BatchMode) as the user it runs as; the "
            f"target {target} must accept a key that user has without a passphrase prompt (ssh-agent, or "
            f"IdentityFile in the ssh configuration) — check with ssh -o BatchMode=yes HOST true as that "
            "user, and the account's ~/.ssh/authorized_keys on the target."
        )
        return AuthError(detail, target=target, stage=stage, remedy=remedy)
    if any(text in stderr for text in _RESOLVE):
        return _unresolved(stderr, target=target, stage=stage)
    for text, reason in _CONNECT:
        if text in stderr:
            return ConnectError(detail, target=target, stage=stage, reason=reason)
    return TransportLost(detail, target=target, stage=stage, command_started=command_started)
