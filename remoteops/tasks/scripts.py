r"""The POSIX sh programs that run a task on the target (``sh/*.sh``, see :mod:`remoteops._sh`). All of them
travel on stdin (``sh -s -- ARGS``);
their arguments are plain data (paths, the nonce's *hash*, bounds), never the nonce itself.

Task directory ``<root>/<task id>/`` (0700, created with ``mkdir`` so a second start of the same ID fails)::

    cmd            the command (generated here, shell-quoted with shlex): records its pid, exports the
                   per-task marker, cd, env, exec argv
    supervise.sh   the supervisor
    mode           tmux | setsid
    cap            bytes kept per stream (``TaskSettings.stream_cap_bytes``)
    sup            "<pid> <starttime>" of the supervisor (its identity, from /proc/<pid>/stat)
    session        tmux "<session id> <created>" or "-"
    pgid           the task's process group (= its session: it runs under setsid)
    combined       the output, stored once: both streams in the order their reads were appended; each
                   stream keeps its first ``cap`` bytes (combined holds at most twice that)
    index          which stream each run of combined is: a line ``<o|e> <offset in combined>`` begins a
                   run that lasts until the next line's offset (the last: to the end of combined); written
                   before the run's bytes, under ``.lock`` (flock), by the supervisor's two keepers, which
                   keep combined's size in ``.size``. ``task_output`` of one stream reads its runs.
                   (A task started before output was stored once has no index, but files stdout, stderr.)
    stdout.dropped, stderr.dropped   bytes of that stream read after the cap and discarded (written once the
                   stream passed the cap; updated per MiB and at the stream's end)
    exit.<nonce>   the exit status, written by the supervisor only

The nonce reaches the supervisor through a FIFO (``nonce.fifo``, opened read-write by the starter) and lives
only in the memory of the starter and the supervisor: it never appears in an argv, an environment, a file's
contents or the task's output, so a task cannot forge its own completion, and printing any marker format
changes nothing. Readers find the exit file by hashing the suffix of each ``exit.*`` name (sha256) and
comparing with the hash the gateway keeps.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping, Sequence

from remoteops._sh import program

__all__ = [
    "CANCEL_SCRIPT",
    "PURGE_SCRIPT",
    "READ_SCRIPT",
    "WAIT_SCRIPT",
    "command_file",
    "start_script",
]

MARK_VAR = "ROG_TASK_MARK"

_SUPERVISOR = program(__package__, "supervisor.sh")
_START = program(__package__, "start.sh")
_CHECKS = program(__package__, "checks.sh")  # shared by the wait, read and cancel programs
WAIT_SCRIPT = program(__package__, "wait.sh")
READ_SCRIPT = program(__package__, "read.sh")
CANCEL_SCRIPT = program(__package__, "cancel.sh")
PURGE_SCRIPT = program(__package__, "purge.sh")


def command_file(argv: Sequence[str], *, marker: str, cwd: str | None, env: Mapping[str, str]) -> str:
    """The task's ``cmd``: record the process group, export the marker, cd, env, then exec argv.

    When SIGINT arrives ignored (inherited from a background launch), ``env --default-signal`` restores it
    where coreutils has it, so that cancellation's first step reaches the program.
    """
    lines = [
        "printf '%s\\n' \"$$\" > .pgid.tmp && mv -f .pgid.tmp pgid",
        f"export {MARK_VAR}={shlex.quote(marker)}",
    ]
    if cwd is not None:
        lines.append(f"cd -- {shlex.quote(cwd)} || exit 1")
    lines.extend(f"export {shlex.quote(f'{name}={value}')}" for name, value in env.items())
    words = shlex.join(argv)
    reset = "=" not in argv[0]
    if reset:
        lines += [
            "ign=0",
            'while read -r k v; do [ "$k" = SigIgn: ] && ign=$v; done < /proc/$$/status',
            "case $ign in *[2367abef]) env --default-signal=INT,QUIT true 2>/dev/null && "
            f"exec env --default-signal=INT,QUIT {words} ;; esac",
        ]
    lines.append(f"exec {words}")
    return "\n".join(lines)


def start_script(
    *, task_id: str, nonce: str, root: str, want: str, cmd_text: str, cap: int = 64 * 1024 * 1024
) -> str:
    """The starter, with its values bound as shell-quoted assignments (the script itself goes on stdin)."""
    assignments = {
        "id": task_id,
        "nonce": nonce,
        "rel": root,
        "want": want,
        "cap": str(cap),
        "cmd_text": cmd_text,
        "sup_text": _SUPERVISOR,
    }
    head = "\n".join(f"{name}={shlex.quote(value)}" for name, value in assignments.items())
    return head + "\n" + _START


def new_nonce() -> str:
    return secrets.token_hex(16)
