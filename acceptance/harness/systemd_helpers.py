"""A real systemd target (tests/fixtures/systemd_target.py) reached over SSH as a plain login user.

Inside the target: an sshd on its own loopback (127.0.0.1:2222), reached from the host through
``ProxyCommand nsenter -t <pid> -n nc``; the login user ``plain`` with a NOPASSWD sudo rule (so
``privilege: auto`` can escalate through ``sudo_nopasswd`` after systemd denies it), and test units:

- ``rog-web.service``: refuses to start unless ``/etc/rog/web.conf`` (owned by ``plain``) begins with
  ``ok``; serves HTTP on 127.0.0.1:8080;
- ``rog-sleep.service``: a long sleep (in /usr/lib: ``mask`` shadows it from /etc);
  ``rog-esc@.service``: a template (for escaped instance names);
- ``rog-log.service``: a oneshot printing ``log-line-1`` … ``log-line-N``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from acceptance.harness import starts
from acceptance.harness.systemd_target import SystemdTarget, systemd_target, systemd_target_unavailable_reason
from remoteops import PrivilegeSettings, RemoteOps, TargetSpec, TransportSettings
from remoteops.agent.boot import LOADER

__all__ = ["LOG_LINES", "SystemdHost", "booted", "unavailable_reason"]

LOG_LINES = 37
_AGENT_MARK = " -I -S -c " + LOADER.splitlines()[0]  # in `ps` of the agent and of its spare supervisor
_AGENT_ZOMBIE = "[python3] <defunct>"  # an ended fork of the agent (its spares: python3), not yet reaped
_SSHD_CONFIG = """\
Port 2222
ListenAddress 127.0.0.1
HostKey /etc/ssh/rog_host_ed25519
PidFile /run/rog-sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AuthorizedKeysFile .ssh/authorized_keys
MaxSessions 20
"""
_UNITS = {
    "/etc/systemd/system/rog-sshd.service": (
        "[Unit]\nDescription=test sshd\n[Service]\nExecStartPre=/bin/mkdir -p /run/sshd\n"
        "ExecStart=/usr/sbin/sshd -D -e -f /etc/ssh/rog_sshd_config\n"
    ),
    "/etc/systemd/system/rog-web.service": (
        "[Unit]\nDescription=test web\n[Service]\n"
        "ExecStartPre=/bin/grep -q ^ok /etc/rog/web.conf\n"
        "ExecStart=/usr/bin/python3 -m http.server --bind 127.0.0.1 --directory /etc/rog 8080\n"
        "ExecReload=/bin/grep -q ^ok /etc/rog/web.conf\n"
        "[Install]\nWantedBy=multi-user.target\n"
    ),
    "/usr/lib/systemd/system/rog-sleep.service": (
        "[Unit]\nDescription=test sleep\n[Service]\nExecStart=/bin/sleep 100000\n"
        "ExecReload=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
    ),
    "/etc/systemd/system/rog-esc@.service": (
        "[Unit]\nDescription=test escaped %I\n[Service]\nExecStart=/bin/sleep 100000\n"
    ),
    "/etc/systemd/system/rog-log.service": (
        "[Unit]\nDescription=test log\n[Service]\nType=oneshot\n"
        f"ExecStart=/bin/sh -c 'for i in $(seq 1 {LOG_LINES}); do echo log-line-$i; done'\n"
    ),
    "/etc/ssh/rog_sshd_config": _SSHD_CONFIG,
    "/etc/rog/web.conf": "ok v1\n",
    "/etc/sudoers.d/rog-plain": "plain ALL=(ALL) NOPASSWD: ALL\n",
}


@dataclass
class SystemdHost:
    target: SystemdTarget
    settings: TransportSettings
    spec: TargetSpec

    def ops(self, *, providers: tuple[str, ...] = ("sudo_nopasswd",)) -> RemoteOps:
        return RemoteOps(
            self.settings,
            [self.spec, TargetSpec(name="other", host=self.spec.host)],
            privilege=PrivilegeSettings(providers=providers),  # type: ignore[arg-type]
        )

    def processes(self) -> list[str]:
        """Command lines of every process in the target (to prove nothing was started), but the gateway's
        own agent channel: the agent boots beside a first call and forks its spares (the same command
        line) after each answer, and a spare it retired is a ``[python3] <defunct>`` until reaped, so
        their count is no sign of what a refused call started (a command the target ran is never one)."""
        out = self.target.run("ps", "-eo", "args=", check=False).stdout
        lines = (line.strip() for line in out.splitlines())
        return [line for line in lines if line and _AGENT_MARK not in line and line != _AGENT_ZOMBIE]


def unavailable_reason() -> str | None:
    """Why the target cannot be booted and reached here, or None."""
    reason = systemd_target_unavailable_reason()
    if reason is None and shutil.which("nc") is None:
        reason = "nc (netcat-openbsd, installed by ops/test.sh) is missing: the ProxyCommand needs it"
    return reason


@starts("systemd")
@contextlib.contextmanager
def booted() -> Iterator[SystemdHost]:
    work = Path(tempfile.mkdtemp(prefix="rogsdh-", dir="/tmp"))
    try:
        key = work / "id"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, capture_output=True
        )
        files = {**_UNITS, "/etc/rog-test/plain.pub": key.with_suffix(".pub").read_text()}
        setup = [
            "useradd --create-home --shell /bin/sh plain && usermod -p '*' plain",
            "install -d -o plain -g plain -m 0700 /home/plain/.ssh",
            "install -o plain -g plain -m 0600 /etc/rog-test/plain.pub /home/plain/.ssh/authorized_keys",
            "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/rog_host_ed25519",
            "chmod 0440 /etc/sudoers.d/rog-plain",
            "chown plain:plain /etc/rog /etc/rog/web.conf",
        ]
        with systemd_target(files=files, setup=setup) as target:
            target.systemctl("start", "rog-sshd.service", "rog-web.service")
            host_key = (target.root / "etc/ssh/rog_host_ed25519.pub").read_text().split()
            (work / "known_hosts").write_text(f"rogsd {host_key[0]} {host_key[1]}\n")
            control = work / "c"
            control.mkdir(mode=0o700)
            (work / "ssh_config").write_text(
                "Host rogsd\n  HostName 127.0.0.1\n  Port 2222\n  User plain\n  HostKeyAlias rogsd\n"
                f"  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {work / 'known_hosts'}\n"
                "  StrictHostKeyChecking yes\n  BatchMode yes\n"
                f"  ProxyCommand nsenter -t {target.pid} -n nc 127.0.0.1 2222\n"
            )
            settings = TransportSettings(ssh_config_file=work / "ssh_config", control_dir=control)
            yield SystemdHost(target=target, settings=settings, spec=TargetSpec(name="sd", host="rogsd"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
