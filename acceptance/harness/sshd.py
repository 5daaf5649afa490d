"""A throwaway OpenSSH sshd for tests and the acceptance benchmark.

``start_sshd()`` is a plain (sync) context manager so it works from pytest session fixtures and from any
other process. It runs ``/usr/sbin/sshd -D -e -f <abs cfg>`` as a foreground child on 127.0.0.1 and a free
high port, with its own ed25519 host key, its own ``AuthorizedKeysFile <dir>/%u`` and a client ``ssh_config``
holding aliases, so callers pass ``-F instance.ssh_config`` and never touch ``~/.ssh``.

Users (created idempotently, needs root): ``ro-plain`` (plain), ``ro-sudo`` (NOPASSWD sudo), ``ro-pass``
(sudo with a password kept 0600 in a private state directory; stable across sessions so concurrent test
sessions on one machine agree on it), ``ro-nopy`` (plain, but sshd gives its sessions a PATH holding every
program of /usr/bin except ``python*``: a target without python3), plus ``root``. For ``su`` tests:
``ro-toor``, a second uid-0 account (``useradd -o -u 0``) that cannot log in over ssh (no key) but has a
random password (0600 in the state directory), so ``su - ro-toor`` from ``ro-plain`` gives uid 0 with a
password without the machine's real root password ever being set or known.

Banner users, whose login shell prints text before any command runs (on stdout and on stderr):
``ro-bashrc`` (bash; ``~/.bashrc`` echoes, before Debian's "not interactive: return"), ``ro-dash`` (dash;
``~/.ssh/rc`` sources ``~/.profile``, which echoes: sshd runs that rc file before every command) and, when
zsh is installed, ``ro-zsh`` (zsh; ``~/.zshenv`` echoes, part of it without a newline). Their rc files are
rewritten at every start.

``ro-tty`` (NOPASSWD sudo) and ``ro-ttypw`` (sudo with a password) whose sudo has ``Defaults requiretty``
(a sudoers drop-in of this fixture session, removed at its end): sudo refuses them without a terminal.

Aliases in the config: ``sshd-plain``, ``sshd-sudo``, ``sshd-pass``, ``sshd-nopy``, ``sshd-root``,
``sshd-bashrc``, ``sshd-dash``, ``sshd-zsh``, ``sshd-tty``, ``sshd-ttypass`` (working), and fault
aliases ``sshd-badhostkey`` (known_hosts holds a different key), ``sshd-wrongkey`` (client key not
authorized), ``sshd-closed`` (a closed local port). ``start_sshd(max_sessions=N)`` sets sshd's
``MaxSessions`` (10 by default).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.harness import starts
from acceptance.harness.procs import stop_process

__all__ = ["SSHD_BINARY", "SshdInstance", "SshdUnavailable", "sshd_unavailable_reason", "start_sshd"]

SSHD_BINARY = Path("/usr/sbin/sshd")
_STATE_DIR = Path("/var/lib/rog-test-sshd")
SU_USER = "ro-toor"
_USERS = {
    "plain": "ro-plain",
    "sudo": "ro-sudo",
    "pass": "ro-pass",
    "nopy": "ro-nopy",
    "root": "root",
    "tty": "ro-tty",
    "ttypass": "ro-ttypw",
}
_TTY_DROPIN_PREFIX = (
    "rog-test-tty-"  # + "<pid>-<random>": one drop-in per fixture session, removed at its end
)
_ZSH = shutil.which("zsh")
# role -> (user, login shell, {file under its home: content}); noise on stdout and stderr before any command
_BANNER_USERS: dict[str, tuple[str, str, dict[str, str]]] = {
    "bashrc": (
        "ro-bashrc",
        "/bin/bash",
        {
            ".bashrc": 'echo "Welcome"\necho "bashrc says hello on stderr" >&2\n'
            "case $- in *i*) ;; *) return ;; esac\n",
            ".profile": 'echo "profile on stdout"\necho "profile on stderr" >&2\n',
        },
    ),
    "dash": (
        "ro-dash",
        "/bin/dash",
        {
            ".profile": 'echo "Message of the day: be nice"\necho "profile on stderr" >&2\n',
            ".ssh/rc": '. "$HOME/.profile"\nprintf "no newline after this banner"\n',
        },
    ),
}
if _ZSH is not None:
    _BANNER_USERS["zsh"] = (
        "ro-zsh",
        _ZSH,
        {".zshenv": 'echo "zsh welcomes you"\nprint -n "half a line"\necho "zshenv on stderr" >&2\n'},
    )
_USERS.update({role: user for role, (user, _shell, _files) in _BANNER_USERS.items()})
_READY_S = 10.0
_STOP_S = 5.0


class SshdUnavailable(RuntimeError):
    """The machine cannot run the fixture (not root, sshd missing)."""


@dataclass(frozen=True)
class SshdInstance:
    """Everything a test needs to reach the throwaway sshd."""

    workdir: Path
    host: str
    port: int
    ssh_config: Path
    known_hosts: Path
    client_key: Path
    control_dir: Path  # short, private (0700): use it as TransportSettings.control_dir
    log_path: Path
    pid: int
    pass_password: str = field(repr=False)  # sudo password of ro-pass
    su_password: str = field(repr=False, default="")  # password of su_user (uid 0)
    su_user: str = "ro-toor"
    tty_password: str = field(repr=False, default="")  # sudo password of ro-ttypw (sudo requires a tty)
    aliases: dict[str, str] = field(default_factory=dict)  # role -> alias (plain, sudo, pass, root, ...)
    users: dict[str, str] = field(default_factory=dict)  # role -> login user

    def alias(self, role: str) -> str:
        return self.aliases[role]


def sshd_unavailable_reason() -> str | None:
    """Why the fixture cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the sshd fixture needs root (several users, sudo); run the suite as root (CI does)"
    if not SSHD_BINARY.exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "openssh-server/openssh-client not installed (ops/test.sh installs them)"
    return None


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _keygen(path: Path, comment: str) -> str:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_suffix(".pub").read_text().strip()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _user_exists(user: str) -> bool:
    return subprocess.run(["id", "-u", user], capture_output=True, check=False).returncode == 0


def _stable_password(user: str) -> str:
    """``user``'s password: generated once (0600 in the state directory), stable across sessions."""
    pw_file = _STATE_DIR / f"{user}.password"
    if pw_file.exists():
        return pw_file.read_text().strip()
    password = secrets.token_urlsafe(18)
    fd = os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True, capture_output=True)
    return password


def _ensure_su_target() -> str:
    """``ro-toor`` (uid 0, no ssh key) with a stable random password; returns it. Caller holds the lock."""
    if not _user_exists(SU_USER):
        _run(["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", "/root", "-s", "/bin/sh", SU_USER])
    return _stable_password(SU_USER)


def _ensure_users() -> tuple[str, str, str]:
    """Create the test users when missing; return the sudo passwords of ro-pass and ro-ttypw and ro-toor's
    password (stable, 0600)."""
    _STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(_STATE_DIR, 0o700)
    with open(_STATE_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for user in ("ro-plain", "ro-sudo", "ro-pass", "ro-nopy", "ro-tty", "ro-ttypw"):
            if not _user_exists(user):
                _run(["useradd", "-m", "-s", "/bin/sh", user])
        _run(["usermod", "-p", "*", "ro-plain"])
        _run(["usermod", "-p", "*", "ro-sudo"])
        _run(["usermod", "-p", "*", "ro-nopy"])
        _run(["usermod", "-p", "*", "ro-tty"])
        _ensure_banner_users()
        sudoers = Path("/etc/sudoers.d/rog-test-users")
        wanted = "ro-sudo ALL=(ALL) NOPASSWD: ALL\nro-pass ALL=(ALL) ALL\n"
        if not sudoers.exists() or sudoers.read_text() != wanted:
            tmp = sudoers.with_name(".rog-test-users.tmp")
            tmp.write_text(wanted)
            os.chmod(tmp, 0o440)
            os.replace(tmp, sudoers)
        return _stable_password("ro-pass"), _stable_password("ro-ttypw"), _ensure_su_target()


def _install_tty_dropin() -> Path:
    """``Defaults requiretty`` for ro-tty (NOPASSWD) and ro-ttypw (password): a drop-in of this session only
    (concurrent sessions each hold their own, identical one), removed by :func:`_remove_tty_dropin`. Those
    of sessions that died without teardown (their pid is gone) are removed here."""
    directory = Path("/etc/sudoers.d")
    for old in directory.glob(f"{_TTY_DROPIN_PREFIX}*"):
        pid = old.name.removeprefix(_TTY_DROPIN_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            old.unlink(missing_ok=True)
    dropin = directory / f"{_TTY_DROPIN_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    tmp = directory / f".{dropin.name}.tmp"  # a name with a dot: sudo skips it
    tmp.write_text(
        "Defaults:ro-tty requiretty\nDefaults:ro-ttypw requiretty\n"
        "ro-tty ALL=(ALL) NOPASSWD: ALL\nro-ttypw ALL=(ALL) ALL\n"
    )
    os.chmod(tmp, 0o440)
    os.replace(tmp, dropin)
    return dropin


def _remove_tty_dropin(dropin: Path) -> None:
    dropin.unlink(missing_ok=True)


def _ensure_banner_users() -> None:
    """The banner users with their shells and rc files (rewritten each time). Caller holds the lock."""
    for user, shell, files in _BANNER_USERS.values():
        if not _user_exists(user):
            _run(["useradd", "-m", "-s", shell, user])
        _run(["usermod", "-p", "*", "-s", shell, user])
        home = Path(f"~{user}").expanduser()
        for name, content in files.items():
            path = home / name
            path.parent.mkdir(mode=0o755, exist_ok=True)
            path.write_text(content)
            path.chmod(0o644)


def _no_python_bin(work: Path) -> Path:
    """A directory of symlinks to every program in /usr/bin except ``python*`` (the PATH of ro-nopy)."""
    directory = work / "nopy-bin"
    directory.mkdir(mode=0o755)
    for program in Path("/usr/bin").iterdir():
        if not program.name.startswith("python"):
            (directory / program.name).symlink_to(program)
    return directory


def _sshd_config(
    work: Path, port: int, host_key: Path, auth_dir: Path, nopy_path: Path, max_sessions: int = 10
) -> str:
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {host_key}",
            f"PidFile {work / 'sshd.pid'}",
            f"AuthorizedKeysFile {auth_dir}/%u",
            "UsePAM no",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "AllowTcpForwarding yes",
            "PermitTTY yes",
            f"MaxSessions {max_sessions}",
            "MaxStartups 100:30:200",
            "PrintMotd no",
            "PrintLastLog no",
            "Subsystem sftp internal-sftp",
            "Match User ro-nopy",  # Match blocks go last
            f"  SetEnv PATH={nopy_path}",
            "",
        ]
    )


def _client_config(work: Path, port: int, closed_port: int, key: Path, wrong_key: Path) -> str:
    known = work / "known_hosts"
    bad_known = work / "known_hosts_bad"
    blocks: list[str] = []

    def host(alias: str, user: str, *, port_: int = port, ident: Path = key, kh: Path = known) -> None:
        blocks.append(
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {port_}\n  User {user}\n  IdentityFile {ident}\n"
            f"  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n"
        )

    for role, user in _USERS.items():
        host(f"sshd-{role}", user)
    host("sshd-badhostkey", "ro-plain", kh=bad_known)
    host("sshd-wrongkey", "ro-plain", ident=wrong_key)
    host("sshd-closed", "ro-plain", port_=closed_port)
    return "\n".join(blocks)


def _wait_listening(proc: subprocess.Popen[bytes], log_path: Path) -> bool:
    """Drain sshd's stderr into the log in a thread (``sshd-log-<pid>``, joined by :func:`_stop`); True once
    sshd says it is listening, False when it exited first (a port taken meanwhile: the caller retries)."""
    listening = threading.Event()
    settled = threading.Event()  # listening, or EOF
    assert proc.stderr is not None
    stderr = proc.stderr

    def pump() -> None:
        with open(log_path, "ab") as log:
            try:
                for line in iter(stderr.readline, b""):
                    log.write(line)
                    log.flush()
                    if b"Server listening on" in line:
                        listening.set()
                        settled.set()
            except (ValueError, OSError):  # the pipe was closed under a reader still waiting: stop quietly
                pass
        settled.set()  # EOF: sshd exited (its exit status may not be reapable yet: poll() can still say None)

    thread = threading.Thread(target=pump, name=f"sshd-log-{proc.pid}", daemon=True)
    thread.start()
    settled.wait(_READY_S)
    return listening.is_set() and proc.poll() is None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop sshd, let the log pump read to EOF (bounded: a session child still holding the pipe keeps it
    open), then close the pipe."""
    stop_process(proc, _STOP_S)
    for thread in threading.enumerate():
        if thread.name == f"sshd-log-{proc.pid}":
            thread.join(_STOP_S)
            if thread.is_alive():  # a reader blocked in readline holds the pipe's lock: close would wait
                return  # for it; the daemon thread ends with the last writer (or with this process)
    if proc.stderr is not None:
        proc.stderr.close()


@starts("sshd")
@contextlib.contextmanager
def start_sshd(workdir: Path | None = None, *, max_sessions: int = 10) -> Iterator[SshdInstance]:
    """Start a throwaway sshd; yield its SshdInstance; stop, reap and remove everything on exit."""
    reason = sshd_unavailable_reason()
    if reason is not None:
        raise SshdUnavailable(reason)
    password, tty_password, su_password = _ensure_users()
    dropin: Path | None = None
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    own_work = workdir is None
    work = Path(tempfile.mkdtemp(prefix="rogsshd-", dir="/tmp")) if workdir is None else workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    # sshd reads AuthorizedKeysFile as the login user: the work dir must be traversable (not listable)
    os.chmod(work, 0o711)  # noqa: S103
    control_dir = Path(tempfile.mkdtemp(prefix="rogc-", dir="/tmp"))
    os.chmod(control_dir, 0o700)
    proc: subprocess.Popen[bytes] | None = None
    # sshd-closed's port: bound, never listening, held for the fixture's life, so connections to it are
    # refused and no other server (a later bind to port 0) can be handed that port meanwhile
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        dropin = _install_tty_dropin()
        closed.bind(("127.0.0.1", 0))
        closed_port = int(closed.getsockname()[1])
        host_pub = _keygen(work / "host_ed25519", "rog-test-host")
        other_pub = _keygen(work / "other_host_ed25519", "rog-test-other-host")
        client_pub = _keygen(work / "client_ed25519", "rog-test-client")
        _keygen(work / "wrong_ed25519", "rog-test-wrong")
        auth_dir = work / "authorized_keys"
        auth_dir.mkdir(mode=0o755)
        for user in _USERS.values():
            (auth_dir / user).write_text(client_pub + "\n")
        log_path = work / "sshd.log"
        nopy_path = _no_python_bin(work)
        for _attempt in range(5):
            port = _free_port()
            cfg = work / "sshd_config"
            cfg.write_text(_sshd_config(work, port, work / "host_ed25519", auth_dir, nopy_path, max_sessions))
            proc = subprocess.Popen(
                [str(SSHD_BINARY), "-D", "-e", "-f", str(cfg)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            if _wait_listening(proc, log_path):
                break
            _stop(proc)
            proc = None
        if proc is None:
            raise SshdUnavailable(f"sshd did not come up; see {log_path}")
        key_type, key_b64 = host_pub.split()[:2]
        other_type, other_b64 = other_pub.split()[:2]
        (work / "known_hosts").write_text(f"[127.0.0.1]:{port} {key_type} {key_b64}\n")
        (work / "known_hosts_bad").write_text(f"[127.0.0.1]:{port} {other_type} {other_b64}\n")
        ssh_config = work / "ssh_config"
        ssh_config.write_text(
            _client_config(work, port, closed_port, work / "client_ed25519", work / "wrong_ed25519")
        )
        aliases = {role: f"sshd-{role}" for role in _USERS}
        aliases.update(badhostkey="sshd-badhostkey", wrongkey="sshd-wrongkey", closed="sshd-closed")
        yield SshdInstance(
            workdir=work,
            host="127.0.0.1",
            port=port,
            ssh_config=ssh_config,
            known_hosts=work / "known_hosts",
            client_key=work / "client_ed25519",
            control_dir=control_dir,
            log_path=log_path,
            pid=proc.pid,
            pass_password=password,
            su_password=su_password,
            su_user=SU_USER,
            tty_password=tty_password,
            aliases=aliases,
            users=dict(_USERS),
        )
    finally:
        if proc is not None:
            _stop(proc)
        if dropin is not None:
            _remove_tty_dropin(dropin)
        closed.close()
        shutil.rmtree(control_dir, ignore_errors=True)
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
