r"""The POSIX sh programs that drive interactive sessions on the target's tmux (``sh/*.sh``, see
:mod:`remoteops._sh`). Each travels on stdin
(``sh -s -- ARGS``); its arguments are plain data (paths, tmux ids, bounds, key names), never the text sent
to a session: that is bound into the program itself (base64, a shell assignment) and reaches tmux through
``load-buffer -`` from a pipe fed by the ``printf`` builtin, so it appears in no argv.

Layout under the configured root (0700)::

    tmux.sock              the gateway-owned tmux server (``-f /dev/null``: no user configuration)
    <name>.<token>/        one directory per incarnation of a session (0700)
        out                the pane's output stream (``pipe-pane``), raw bytes, append only, bounded by
                           ``ulimit -f`` on its writer
        wrap               started by tmux in the pane: attaches the pipe, then execs the login shell
        pipecmd, cwd, piped

The pane's program attaches the output pipe itself before the shell starts, so the stream holds everything
the shell ever printed. The session's identity is its tmux ``session_id`` with ``session_created``; every
program checks it before acting, so a recycled id of a newer server is never mistaken for the recorded one.
"""

from __future__ import annotations

import base64
import shlex

from remoteops._sh import program

__all__ = [
    "CLOSE_SCRIPT",
    "ENSURE_SCRIPT",
    "LOOK_SCRIPT",
    "READ_SCRIPT",
    "WAIT_SCRIPT",
    "send_script",
]

# Each program begins with the prelude (``sh/prelude.sh``): $1 is the root. A tmux server whose last session
# just ended is still closing: a client that reaches it in that moment reads "server exited unexpectedly";
# tmx retries that (bounded). `absent` says whether the last failure proves that no server (so no session)
# exists.
ENSURE_SCRIPT = program(__package__, "ensure.sh")
LOOK_SCRIPT = program(__package__, "look.sh")
READ_SCRIPT = program(__package__, "read.sh")
WAIT_SCRIPT = program(__package__, "wait.sh")
CLOSE_SCRIPT = program(__package__, "close.sh")
_SEND = program(__package__, "send.sh")


def send_script(text: bytes) -> str:
    """The send program with ``text`` bound as a base64 shell assignment (it travels on stdin only)."""
    return f"b64={shlex.quote(base64.b64encode(text).decode())}\n" + _SEND
