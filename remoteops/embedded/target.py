"""The embedded SSH target: an in-process asyncssh server on loopback that OpenSSH's ``ssh`` can drive.

``remoteops-gateway demo`` and the fast tests start it so that the gateway's full OpenSSH path (system ``ssh``
binary, ControlMaster, host-key checking) runs against something real on a machine with nothing installed but
the OpenSSH client::

    async with EmbeddedTarget(workdir) as target:
        subprocess.run(["ssh", "-F", str(target.ssh_config_path), target.alias, "uname -a"])

On enter it generates fresh ed25519 host and client keys, listens on ``127.0.0.1`` (port chosen by the
kernel), and writes into ``<workdir>/ssh`` (mode 0700): ``id_ed25519`` (0600) + ``.pub``, ``known_hosts``
pinning the host key for ``[127.0.0.1]:<port>``, and ``ssh_config`` with one ``Host <alias>`` block
(``StrictHostKeyChecking yes``, ``IdentitiesOnly yes``, ``BatchMode yes``).

Server side:

* Only public-key authentication, only the generated client key, only the current user's name.
* Every shell/exec request runs as the current user via ``/bin/sh -c <command>`` in the sandbox directory
  (default ``<workdir>/sandbox``, created 0700), optionally on a real pty (``remoteops.embedded.session``).
* Environment: ``HOME`` **is the sandbox** (``cd``, ``~`` and tools' dotfiles stay inside it and never touch
  the real home), ``USER``/``LOGNAME`` the current user, ``SHELL=/bin/sh``; ``PATH``, ``LANG``, ``LC_*``,
  ``TZ``, ``TMPDIR`` inherited from this process; ``LANG``/``LC_*`` also accepted from the client;
  ``SSH_CONNECTION``/``SSH_CLIENT`` set as sshd does.
* SFTP via asyncssh's server chrooted to the sandbox; it reports exit status 0, so ``scp`` in SFTP mode works
  too — but its paths are sandbox-relative, unlike exec, ``scp -O`` and rsync, which see the real filesystem.
* TCP forwards: ``-L``/``-D`` to anywhere, ``-R`` listening on loopback names only; Unix-socket forwards are
  allowed. No agent or X11 forwarding.

On exit the listener and every connection are closed, running commands are terminated (process group
SIGTERM → SIGKILL) and reaped. Files written under ``workdir`` remain: the caller owns that directory.

Logging: asyncssh logs to the ``asyncssh`` logger; this module configures no logging and never logs keys.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
import asyncssh

from remoteops._errors import InvalidRequest
from remoteops.embedded.session import run_session

__all__ = ["EmbeddedTarget"]

_HOST = "127.0.0.1"
_KEY_ALG = "ssh-ed25519"
_ALIAS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_INHERITED_ENV = ("PATH", "LANG", "TZ", "TMPDIR")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_CLOSE_WAIT_S = 10.0


class EmbeddedTarget:
    """Async context manager running a loopback SSH server for ``ssh -F <ssh_config_path> <alias>``."""

    def __init__(self, workdir: Path, *, alias: str = "demo", sandbox: Path | None = None) -> None:
        if not _ALIAS_RE.fullmatch(alias):
            raise InvalidRequest(field="alias", reason=f"must match {_ALIAS_RE.pattern}")
        self._workdir = Path(workdir).absolute()
        self._alias = alias
        self._sandbox = (Path(sandbox) if sandbox is not None else self._workdir / "sandbox").absolute()
        self._ssh_dir = self._workdir / "ssh"
        self._user = pwd.getpwuid(os.getuid()).pw_name
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._port: int | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._sessions: set[asyncio.Task[object]] = set()
        self._client_key: asyncssh.SSHKey | None = None

    # ------------------------------------------------------------------------------------------ properties

    @property
    def alias(self) -> str:
        return self._alias

    @property
    def host(self) -> str:
        return _HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("EmbeddedTarget is not running")
        return self._port

    @property
    def user(self) -> str:
        return self._user

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def sandbox(self) -> Path:
        return self._sandbox

    @property
    def ssh_config_path(self) -> Path:
        return self._ssh_dir / "ssh_config"

    @property
    def known_hosts_path(self) -> Path:
        return self._ssh_dir / "known_hosts"

    @property
    def client_key_path(self) -> Path:
        return self._ssh_dir / "id_ed25519"

    # ------------------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        if self._acceptor is not None:
            raise RuntimeError("EmbeddedTarget is already running")
        # The workdir is the caller's: created private if missing, never chmod'ed.
        self._workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _make_private_dir(self._ssh_dir)
        if not self._sandbox.exists():
            _make_private_dir(self._sandbox)
        host_key = asyncssh.generate_private_key(_KEY_ALG)
        client_key = asyncssh.generate_private_key(_KEY_ALG, comment=f"remoteops-embedded-{self._alias}")
        self._client_key = client_key
        _write_private(self.client_key_path, client_key.export_private_key())
        _write_private(self.client_key_path.with_suffix(".pub"), client_key.export_public_key())
        self._acceptor = await asyncssh.create_server(
            self._new_server,
            _HOST,
            0,
            server_host_keys=[host_key],
            process_factory=self._serve_session,
            sftp_factory=self._new_sftp_server,
            allow_scp=False,  # `scp -O` runs the real scp binary through /bin/sh like every other command
            encoding=None,
            line_editor=False,
            agent_forwarding=False,
            x11_forwarding=False,
        )
        try:
            self._port = self._acceptor.get_port()
            host_pub = host_key.export_public_key().decode().split()
            host_entry = _HOST if self._port == 22 else f"[{_HOST}]:{self._port}"
            _write_private(self.known_hosts_path, f"{host_entry} {host_pub[0]} {host_pub[1]}\n".encode())
            _write_private(self.ssh_config_path, self._render_config().encode())
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._shutdown()

    async def _shutdown(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_WAIT_S):
            acceptor, self._acceptor = self._acceptor, None
            if acceptor is not None:
                acceptor.close()
                await acceptor.wait_closed()
            for conn in list(self._connections):
                conn.close()
            for conn in list(self._connections):
                await conn.wait_closed()
            # Channels are closed now, so sessions tear their commands down; cancel any that lag.
            sessions = list(self._sessions)
            if sessions:
                with anyio.move_on_after(_CLOSE_WAIT_S / 2):
                    await asyncio.gather(*sessions, return_exceptions=True)
                for task in sessions:
                    task.cancel()
                await asyncio.gather(*sessions, return_exceptions=True)
        self._port = None

    def _render_config(self) -> str:
        lines = [
            f"Host {self._alias}",
            f"    HostName {_HOST}",
            f"    Port {self.port}",
            f"    User {_config_quote(self._user, 'user')}",
            f"    IdentityFile {_config_path(self.client_key_path)}",
            "    IdentitiesOnly yes",
            "    IdentityAgent none",
            f"    UserKnownHostsFile {_config_path(self.known_hosts_path)}",
            "    GlobalKnownHostsFile /dev/null",
            "    StrictHostKeyChecking yes",
            "    UpdateHostKeys no",
            "    CheckHostIP no",
            "    PreferredAuthentications publickey",
            "    PasswordAuthentication no",
            "    KbdInteractiveAuthentication no",
            "    BatchMode yes",
            "    ForwardAgent no",
            "    ForwardX11 no",
        ]
        header = "# Written by remoteops EmbeddedTarget; regenerated on every start."
        return "\n".join([header, *lines]) + "\n"

    # ----------------------------------------------------------------------------------------- server side

    def _new_server(self) -> asyncssh.SSHServer:
        return _Server(self)

    def _new_sftp_server(self, chan: asyncssh.SSHServerChannel[bytes]) -> asyncssh.SFTPServer:
        return _SandboxSFTPServer(chan, chroot=os.fsencode(self._sandbox))

    def _base_env(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in _INHERITED_ENV if name in os.environ}
        env.update({name: value for name, value in os.environ.items() if name.startswith("LC_")})
        env.setdefault("PATH", _DEFAULT_PATH)
        env.update(HOME=str(self._sandbox), USER=self._user, LOGNAME=self._user, SHELL="/bin/sh")
        return env

    async def _serve_session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._sessions.add(task)
        try:
            await run_session(process, sandbox=self._sandbox, base_env=self._base_env())
        finally:
            if task is not None:
                self._sessions.discard(task)

    def _is_client_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        expected = self._client_key
        return username == self._user and expected is not None and key.public_data == expected.public_data


class _Server(asyncssh.SSHServer):
    """Per-connection policy: public key only, forwards as documented in the module docstring."""

    def __init__(self, target: EmbeddedTarget) -> None:
        self._target = target
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._target._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._target._connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True  # authentication is always required

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self._target._is_client_key(username, key)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        return True  # -L and -D

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return listen_host in _LOOPBACK_NAMES  # -R: never listen beyond loopback

    def unix_connection_requested(self, dest_path: str) -> bool:
        return True

    def unix_server_requested(self, listen_path: str) -> bool:
        return True


class _SandboxSFTPServer(asyncssh.SFTPServer):
    """asyncssh's SFTP server, chrooted, that reports exit status 0 (OpenSSH's scp/sftp expect one)."""

    def exit(self) -> None:
        self.channel.exit(0)


# ---------------------------------------------------------------------------------------------- files


def _make_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _config_quote(value: str, field: str = "workdir") -> str:
    if '"' in value or "\n" in value:
        raise InvalidRequest(field=field, reason="a '\"' or a newline cannot be written into ssh_config")
    return f'"{value}"' if any(ch.isspace() for ch in value) else value


def _config_path(path: Path) -> str:
    # IdentityFile/UserKnownHostsFile expand %-tokens: escape them (paths are absolute, so no ~).
    return _config_quote(str(path).replace("%", "%%"))
