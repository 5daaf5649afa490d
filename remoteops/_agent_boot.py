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

import hashlib
import shlex
from functools import cache
from pathlib import Path

__all__ = [
    "EXIT_CHECKSUM",
    "EXIT_SHORT",
    "EXIT_TOO_OLD",
    "LOADER",
    "agent_source",
    "boot_command",
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


@cache
def agent_source() -> tuple[bytes, str]:
    """The agent program's bytes and their SHA-256 (hex)."""
    source = Path(__file__).with_name("_agent_program.py").read_bytes()
    return source, hashlib.sha256(source).hexdigest()


def boot_command(python: str = "python3") -> str:
    """The remote command line that starts the agent (the login shell parses it)."""
    source, digest = agent_source()
    return shlex.join(["exec", python, "-I", "-S", "-c", LOADER, str(len(source)), digest])
