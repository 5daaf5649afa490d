"""How the agent gets onto a target: a tiny loader given to ``python3 -c`` reads the agent from stdin.

The remote command is ``exec python3 -I -S -c LOADER SIZE SHA256`` (rendered with ``shlex.join``, like every
command remoteops runs): ``-I -S`` keep the target's environment variables, user site-packages and
``.pth`` files out of the agent. The loader checks the Python version, reads exactly SIZE bytes from fd 0
(no read-ahead: the first frame follows directly), checks their SHA-256 and runs them. Nothing is written
to the target's disk. Exit codes that tell the gateway why there is no agent:

* 127 / 126 — the login shell found no (executable) ``python3``;
* ``EXIT_TOO_OLD`` — Python older than 3.8; ``EXIT_SHORT`` — stdin ended early; ``EXIT_CHECKSUM`` — the
  bytes that arrived are not the agent.
"""

from __future__ import annotations

import shlex

from remoteops._errors import ConnectError, TransportLost
from remoteops.agent import program
from remoteops.ssh.args import classify_ssh_failure

__all__ = [
    "EXIT_CHECKSUM",
    "EXIT_SHORT",
    "EXIT_TOO_OLD",
    "LOADER",
    "AgentUnavailable",
    "MasterGone",
    "agent_source",
    "boot_command",
    "boot_failure",
]

EXIT_SHORT = 90
EXIT_CHECKSUM = 91
EXIT_TOO_OLD = 92

LOADER = f"""import os,sys,hashlib
if sys.version_info<(3,8):
 sys.stderr.write("rog-agent: Python >= 3.8 is needed, not "+sys.version.split()[0]+"\\n")
 sys.exit({EXIT_TOO_OLD})
n=int(sys.argv[1]);b=b""
while len(b)<n:
 c=os.read(0,n-len(b))
 if not c:sys.exit({EXIT_SHORT})
 b+=c
if hashlib.sha256(b).hexdigest()!=sys.argv[2]:
 sys.stderr.write("rog-agent: checksum mismatch\\n");sys.exit({EXIT_CHECKSUM})
exec(compile(b,"rog-agent","exec"),{{"__name__":"__rog_agent__"}})
"""


def agent_source() -> tuple[bytes, str]:
    """The agent program's bytes and their SHA-256 (hex): the parts of ``agent.program`` joined."""
    return program.agent_source()


def boot_command(python: str = "python3") -> str:
    """The remote command line that starts the agent (the login shell parses it)."""
    source, digest = agent_source()
    return shlex.join(["exec", python, "-I", "-S", "-c", LOADER, str(len(source)), digest])


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
