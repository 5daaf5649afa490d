"""The one command-rendering function: argv (+ cwd, env, remote time limit) -> the remote command string.

Everything remoteops runs on a target goes through :func:`render_command`. The string is POSIX sh built with
``shlex.join``: the target's login shell parses it into
``exec sh -c WRAPPER rog NONCE LIMIT KILL CWD N ENV... ARGV...``, so every argv element arrives as one literal
word whatever it contains. The wrapper

* prints a start marker on stderr (the command is about to start),
* exports the validated environment plus ``ROG_CALL=<nonce>`` (descendants inherit it, so a kill can find
  those that left the session: ``setsid``, double fork) and changes directory (``cd --``),
* answers a program that is not there (or not executable) with exit 127 and a plain
  ``rog: NAME: command not found`` instead of the ``timeout: failed to run command`` of coreutils,
* runs argv under ``timeout -k KILL LIMIT`` when the target has ``timeout``; otherwise under a small sh
  watchdog (TERM after LIMIT, KILL after KILL more seconds; degraded: it signals the direct child only, so
  grandchildren may outlive it -- the local ceiling then ends the session and kills it by session id),
* prints an end marker carrying the exit status on stderr and exits with that status.

A privileged command (``escalation``) is the same wrapper behind the provider's words -- ``sudo -n --``,
``sudo -S -p PROMPT --``, ``su - USER -c 'exec sh -c …'``, ``docker run … chroot /host`` or nothing for a
uid-0 login -- and the wrapper first re-proves uid 0: when ``id -u`` is not 0 it prints
``\\x1eROG<nonce>U`` and exits 125 without starting anything.

The markers (``\\x1eROG<nonce>S`` / ``\\x1eROG<nonce>E<status>``) tell a remote ``exit 255`` apart from
ssh's own 255 and show whether a lost connection happened before or after the command started. Env values are
visible in the target's process list (acceptable for env); payloads and secrets travel on stdin only.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from remoteops._errors import InvalidRequest
from remoteops.privilege.wire import Escalation
from remoteops.requests import check_argv, check_env, check_text

__all__ = [
    "MARKER_ALLOWANCE",
    "MAX_COMMAND_BYTES",
    "Markers",
    "RenderedCommand",
    "escalation_words",
    "format_seconds",
    "new_nonce",
    "parse_markers",
    "render_command",
    "validate_env",
    "validate_request",
]

MARKER_ALLOWANCE = 64  # bytes the two markers may take on stderr
# Linux MAX_ARG_STRLEN (128 KiB incl. the NUL): the text is one argv word of the local ssh client and of
# the target's ``shell -c``; a longer one fails with E2BIG before anything runs.
MAX_COMMAND_BYTES = 128 * 1024 - 1
_MIN_LIMIT_S = 0.001  # the remote limit is rendered with millisecond resolution

_WRAPPER = r"""n=$1 t=$2 k=$3 d=$4 e=$5; shift 5
printf '\036ROG%sS\n' "$n" >&2
tm=; command -v timeout >/dev/null 2>&1 && tm=timeout
while [ "$e" -gt 0 ]; do export "$1"; shift; e=$((e - 1)); done
export ROG_CALL="$n"
rc=0
if [ -n "$d" ]; then cd -- "$d" || rc=$?; fi
if [ "$rc" -eq 0 ]; then
  f=
  case $1 in
    */*) if [ -f "$1" ] && [ -x "$1" ]; then f=1; elif [ -e "$1" ]; then f=x; else f=n; fi ;;
    *) p=$PATH:
       while [ -n "$p" ]; do
         q=${p%%:*}; p=${p#*:}
         if [ -f "${q:-.}/$1" ] && [ -x "${q:-.}/$1" ]; then f=1; break; fi
       done ;;
  esac
  case $f in
    1) ;;
    x) printf 'rog: %s: Permission denied\n' "$1" >&2; rc=126 ;;
    n) printf 'rog: %s: No such file or directory\n' "$1" >&2; rc=127 ;;
    *) printf 'rog: %s: command not found\n' "$1" >&2; rc=127 ;;
  esac
fi
if [ "$rc" -eq 0 ]; then
  if [ -n "$tm" ]; then
    "$tm" -k "$k" "$t" "$@"; rc=$?
  else
    exec 3<&0
    "$@" <&3 3<&- & p=$!
    exec 3<&-
    (sleep "$t"; kill -TERM "$p"; sleep "$k"; kill -KILL "$p") >/dev/null 2>&1 </dev/null & w=$!
    wait "$p"; rc=$?
    kill "$w" 2>/dev/null
  fi
fi
printf '\036ROG%sE%d\n' "$n" "$rc" >&2
exit "$rc"
"""

# Privileged: prove uid 0 before anything else ($1 is the nonce before the shift).
_ROOT_CHECK = r"""[ "$(id -u)" = 0 ] || { printf '\036ROG%sU\n' "$1" >&2; exit 125; }
"""

# A variant without `timeout`, selected only by tests to exercise the degraded path.
_WRAPPER_NO_TIMEOUT = _WRAPPER.replace("tm=; command -v timeout >/dev/null 2>&1 && tm=timeout", "tm=")


def escalation_words(escalation: Escalation, inner: Sequence[str]) -> list[str]:
    """The provider's words around ``inner`` (the wrapper's ``sh -c`` argv): the one place they are made."""
    p = escalation.provider
    if p == "direct_root":
        return ["exec", *inner]
    if p == "sudo_nopasswd":
        return ["exec", "sudo", "-n", "--", *inner]
    if p == "sudo_password":
        return ["exec", "sudo", "-S", "-p", escalation.prompt, "--", *inner]
    if p == "su_password":
        return ["exec", "su", "-", escalation.su_user, "-c", shlex.join(["exec", *inner])]
    if p == "docker_host_root" and escalation.docker_image:
        return [
            "exec", escalation.docker_binary, "run", "--rm", "-i", "--privileged", "--pid=host",
            "--net=host", "--ipc=host", "-v", "/:/host", *escalation.docker_run_args, escalation.docker_image,
            "chroot", "/host", *inner,
        ]  # fmt: skip
    raise InvalidRequest(field="privilege", reason=f"provider {p} cannot be rendered (not configured)")


def new_nonce() -> str:
    return secrets.token_hex(8)


def format_seconds(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def validate_env(env: Mapping[str, str] | None) -> list[str]:
    """Return ``NAME=value`` words; names must match ``^[A-Za-z_][A-Za-z0-9_]*$``, values hold no NUL.

    Raises :class:`InvalidRequest` (``field="env.NAME"``)."""
    return [f"{name}={value}" for name, value in check_env(env).items()]


@dataclass(frozen=True)
class RenderedCommand:
    text: str
    nonce: str

    @property
    def start_marker(self) -> bytes:
        return b"\x1eROG" + self.nonce.encode() + b"S\n"

    @property
    def end_prefix(self) -> bytes:
        return b"\x1eROG" + self.nonce.encode() + b"E"

    @property
    def not_root_marker(self) -> bytes:
        return b"\x1eROG" + self.nonce.encode() + b"U\n"


def render_command(
    argv: Sequence[str],
    *,
    time_limit_s: float,
    kill_after_s: int = 5,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    nonce: str | None = None,
    use_timeout_binary: bool = True,
    escalation: Escalation | None = None,
) -> RenderedCommand:
    """Render argv for the remote login shell. ``argv`` is data: it is never re-parsed as shell code.

    Input that cannot be run as given (empty argv or program name, a NUL byte or lone surrogate in an argv
    word, env name/value or cwd, a command line longer than ``MAX_COMMAND_BYTES``) raises
    :class:`InvalidRequest` naming the field."""
    check_argv(argv)
    if cwd is not None:
        check_text("cwd", cwd)
    if not time_limit_s >= _MIN_LIMIT_S:  # also NaN; a smaller limit renders as "0": `timeout` reads "none"
        raise InvalidRequest(field="time_limit_s", reason=f"must be at least {_MIN_LIMIT_S} s")
    env_words = validate_env(env)
    nonce = nonce or new_nonce()
    wrapper = _WRAPPER if use_timeout_binary else _WRAPPER_NO_TIMEOUT
    if escalation is not None:
        wrapper = _ROOT_CHECK + wrapper
    inner = [
        "sh", "-c", wrapper, "rog", nonce,
        format_seconds(time_limit_s), str(kill_after_s), cwd or "", str(len(env_words)),
        *env_words, *argv,
    ]  # fmt: skip
    words = ["exec", *inner] if escalation is None else escalation_words(escalation, inner)
    text = shlex.join(words)
    size = len(text.encode())
    if size > MAX_COMMAND_BYTES:
        raise InvalidRequest(
            field="argv",
            reason=f"the command line is {size} bytes, more than the {MAX_COMMAND_BYTES} one fits in; "
            "send large data on stdin",
        )
    return RenderedCommand(text=text, nonce=nonce)


def validate_request(argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None) -> None:
    """The checks :func:`render_command` makes, for carriers that do not render (the agent): one rule set,
    the same errors on every carrier."""
    render_command(argv, time_limit_s=1, cwd=cwd, env=env, nonce="0")


@dataclass(frozen=True)
class Markers:
    started: bool
    exit_code: int | None  # from the end marker; None when the wrapper did not finish
    head: bytes
    tail: bytes
    gap: int


_END = re.compile(rb"(\d{1,3})\n")


def parse_markers(rendered: RenderedCommand, head: bytes, tail: bytes, gap: int) -> Markers:
    """Find and remove the wrapper's markers from captured stderr (head, dropped gap, tail)."""
    if gap == 0:
        head, tail = head + tail, b""
    start = rendered.start_marker
    idx = head.find(start)
    started = idx >= 0
    if started:
        head = head[:idx] + head[idx + len(start) :]
    exit_code: int | None = None
    where = tail if tail else head
    pos = where.rfind(rendered.end_prefix)
    if pos >= 0:
        m = _END.match(where, pos + len(rendered.end_prefix))
        if m is not None:
            exit_code = int(m.group(1))
            where = where[:pos] + where[m.end() :]
            if tail:
                tail = where
            else:
                head = where
    return Markers(started=started, exit_code=exit_code, head=head, tail=tail, gap=gap)
