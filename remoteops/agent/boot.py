"""How the agent gets onto a target: a tiny loader given to ``python3 -c`` reads the agent from stdin.

The remote command is ``exec python3 -I -S -c LOADER SIZE SHA256 NONCE`` (rendered with ``shlex.join``, like
every command remoteops runs): ``-I -S`` keep the target's environment variables, user site-packages and
``.pth`` files out of the agent. The loader checks the Python version, reads exactly SIZE bytes from fd 0
(no read-ahead: the first frame follows directly), checks their SHA-256, writes the start marker line on
stdout and runs them with ``__rog_build__`` = SHA256 (the agent's build id, reported in HELLO). Nothing is
written to the target's disk.

The start marker (:attr:`AgentBoot.marker`: ``\\x1eROGA`` + the first 32 hex digits of SHA-256(NONCE) +
newline, NONCE fresh per boot) is derived from the nonce rather than equal to it, so no echo of the command
line can contain it: whatever the login shell, its rc files, ``~/.ssh/rc`` or a banner print on stdout before
it is discarded (:class:`StartScanner`), and the frames start right after it. Stderr is never parsed while the
agent comes up; it only explains a session that ended before HELLO.

Exit codes that tell the gateway why there is no agent:

* 127 / 126 — the login shell found no (executable) ``python3``;
* ``EXIT_TOO_OLD`` — Python older than 3.8; ``EXIT_SHORT`` — stdin ended early; ``EXIT_CHECKSUM`` — the
  bytes that arrived are not the agent.
"""

from __future__ import annotations

import hashlib
import secrets
import shlex
from dataclasses import dataclass, field

from remoteops._errors import ConnectError, TransportLost
from remoteops.agent import program
from remoteops.ssh.args import classify_ssh_failure

__all__ = [
    "EXIT_CHECKSUM",
    "EXIT_SHORT",
    "EXIT_TOO_OLD",
    "LOADER",
    "AgentBoot",
    "AgentUnavailable",
    "MasterGone",
    "StartScanner",
    "agent_source",
    "boot_command",
    "boot_failure",
    "current_build",
    "new_boot",
]

EXIT_SHORT = 90
EXIT_CHECKSUM = 91
EXIT_TOO_OLD = 92
_MARKER_PREFIX = b"\x1eROGA"
_MARKER_DIGITS = 32

LOADER = f"""import os,sys,hashlib
if sys.version_info<(3,8):
 sys.stderr.write("rog-agent: Python >= 3.8 is needed, not "+sys.version.split()[0]+"\\n")
 sys.exit({EXIT_TOO_OLD})
n=int(sys.argv[1]);h=sys.argv[2];b=b""
while len(b)<n:
 c=os.read(0,n-len(b))
 if not c:sys.exit({EXIT_SHORT})
 b+=c
if hashlib.sha256(b).hexdigest()!=h:
 sys.stderr.write("rog-agent: checksum mismatch\\n");sys.exit({EXIT_CHECKSUM})
os.write(1,b"\\x1eROGA"+hashlib.sha256(sys.argv[3].encode()).hexdigest()[:{_MARKER_DIGITS}].encode()+b"\\n")
exec(compile(b,"rog-agent","exec"),{{"__name__":"__rog_agent__","__rog_build__":h}})
"""


def agent_source() -> tuple[bytes, str]:
    """The agent program's bytes and their SHA-256 (hex): the parts of ``agent.program`` joined."""
    return program.agent_source()


def current_build() -> str:
    """The build id (SHA-256 hex) of the agent this gateway sends now; a running agent of another build is
    replaced."""
    return agent_source()[1]


@dataclass(frozen=True)
class AgentBoot:
    """One agent start: the program's bytes, their build id and the nonce its start marker is made of."""

    source: bytes = field(repr=False)
    build: str
    nonce: str

    def argv(self, python: str = "python3") -> list[str]:
        """The loader's argv (the user agent ``exec``\\s it; the root agent puts it behind its provider)."""
        return [python, "-I", "-S", "-c", LOADER, str(len(self.source)), self.build, self.nonce]

    def command(self, python: str = "python3") -> str:
        """The remote command line that starts the agent (the login shell parses it)."""
        return shlex.join(["exec", *self.argv(python)])

    @property
    def marker(self) -> bytes:
        """The line the loader writes on stdout right before the agent starts."""
        digest = hashlib.sha256(self.nonce.encode()).hexdigest()[:_MARKER_DIGITS]
        return _MARKER_PREFIX + digest.encode() + b"\n"


def new_boot() -> AgentBoot:
    """A fresh start of the current agent (a new nonce each time)."""
    source, build = agent_source()
    return AgentBoot(source=source, build=build, nonce=secrets.token_hex(16))


def boot_command(python: str = "python3") -> str:
    """The remote command line of a fresh start of the current agent (its marker unknown to the caller:
    the channel uses :func:`new_boot`, which keeps it)."""
    return new_boot().command(python)


class StartScanner:
    """Finds the start marker in the agent session's stdout: what comes before it (login-shell output,
    banners) is dropped, whatever its size; only the marker's length minus one byte is ever kept."""

    def __init__(self, marker: bytes) -> None:
        self._marker = marker
        self._held = b""
        self.started = False
        self.discarded = 0  # bytes of stdout noise dropped before the marker

    def feed(self, chunk: bytes) -> bytes:
        """The bytes of ``chunk`` that follow the marker (b"" while it has not been seen)."""
        if self.started:
            return chunk
        data = self._held + chunk
        index = data.find(self._marker)
        if index < 0:
            keep = len(self._marker) - 1
            self.discarded += max(0, len(data) - keep)
            self._held = data[-keep:]
            return b""
        self.started = True
        self.discarded += index
        self._held = b""
        return data[index + len(self._marker) :]


class AgentUnavailable(Exception):
    """The target cannot run the agent (no python3, too old, refused, protocol mismatch): use ssh."""

    def __init__(self, reason: str, *, capability: str = "python3") -> None:
        super().__init__(reason)
        self.reason = reason
        self.capability = capability


class MasterGone(Exception):
    """The master refused or lost the session before the agent started: invalidate it and try again."""


def boot_failure(code: int | None, stderr: str, *, target: str, via_master: bool) -> BaseException:
    """Why the agent's session ended before HELLO: ssh's own failures classified exactly as the ssh carrier
    classifies them (nothing of the caller's ran), or why this target cannot run the agent."""
    if code == 255 or code is None:
        if via_master:  # the master refused or lost the session
            return MasterGone(stderr)
        error = classify_ssh_failure(stderr, target=target, stage="agent", command_started=False)
        if isinstance(error, TransportLost):  # nothing of the caller's ran: a connect-stage failure
            return ConnectError(stderr[-600:] or "the agent session closed", target=target, stage="agent")
        return error
    if code in (126, 127):
        return AgentUnavailable(f"no usable python3 on the target's PATH ({stderr[-200:] or code})")
    if code == EXIT_TOO_OLD:
        return AgentUnavailable(stderr[-200:] or "python3 is older than 3.8")
    if code in (EXIT_SHORT, EXIT_CHECKSUM):
        return AgentUnavailable(f"the agent did not arrive intact ({stderr[-200:] or code})")
    return AgentUnavailable(f"the target refused the agent (exit {code}): {stderr[-300:]}")
