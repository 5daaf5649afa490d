"""Paths for transfers: the bounded local side, remote paths as data, and the ssh words rsync/scp get.

Local paths must lie under a configured root after every symlink is resolved; a ``..`` component is refused
before resolving (it is never needed under a root). Remote paths are data: they travel as single argv words
(rsync ``--secluded-args`` sends them over its protocol, never through the remote shell), a relative one
starting with ``-`` gets ``./`` so no tool reads it as an option, and a download source (which the remote
rsync expands as a wildcard pattern, per path component) has the pattern characters of every component
that holds one escaped.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from remoteops._errors import InvalidRequest
from remoteops.transfers.errors import LocalPathDenied

__all__ = [
    "LocalRoots",
    "escape_glob",
    "has_glob",
    "remote_arg",
    "remote_parent",
    "rsh_command",
    "scp_options",
    "ssh_prefix",
    "staged_name",
    "validate_remote_path",
]

_MAX_PATH = 4096
_GLOB = frozenset("*?[")
_GLOB_ESCAPE = frozenset("*?[]\\")


class LocalRoots:
    """The operator's local roots, resolved once."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = tuple(Path(os.path.realpath(Path(r).expanduser())) for r in roots)

    def __bool__(self) -> bool:
        return bool(self.roots)

    def resolve(self, raw: str, *, target: str | None = None) -> Path:
        """The real path for ``raw`` (symlinks followed as far as the path exists), or LocalPathDenied."""
        if not self.roots:
            raise LocalPathDenied("no local roots are configured", path=raw, reason="no_roots", target=target)
        if not raw or "\x00" in raw or len(raw.encode("utf-8", "surrogatepass")) > _MAX_PATH:
            raise InvalidRequest(field="local_path", reason="empty, too long or holds a NUL byte")
        given = Path(raw).expanduser()
        if ".." in given.parts:
            raise LocalPathDenied(f"local path {raw!r} uses '..'", path=raw, reason="dotdot", target=target)
        absolute = given if given.is_absolute() else self.roots[0] / given
        real = Path(os.path.realpath(absolute))
        for root in self.roots:
            if real == root or real.is_relative_to(root):
                return real
        reason = "symlink_escape" if Path(os.path.abspath(absolute)) != real else "outside_roots"
        raise LocalPathDenied(
            f"local path {raw!r} resolves to {str(real)!r}, outside the configured local roots",
            path=raw,
            reason=reason,
            target=target,
        )


def validate_remote_path(path: str, *, target: str) -> str:
    """Refuse what no remote tool can take (empty, NUL, too long); give a leading ``-`` a ``./``."""
    if not path or "\x00" in path or len(path.encode("utf-8", "surrogatepass")) > _MAX_PATH:
        raise InvalidRequest(target=target, field="remote_path", reason="empty, too long or holds a NUL byte")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(target=target, field="remote_path", reason="not valid UTF-8") from None
    return f"./{path}" if path.startswith("-") else path


def remote_parent(path: str) -> str:
    parent = str(PurePosixPath(path).parent)
    return parent or "."


def has_glob(text: str) -> bool:
    return bool(_GLOB.intersection(text))


def staged_name(path: str) -> str:
    """A wildcard-free name next to ``path``; stable for one path, so its partial file is found again."""
    parent, name = str(PurePosixPath(path).parent), PurePosixPath(path).name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{parent}/.rog-in.{digest}"


def escape_glob(path: str) -> str:
    """A remote path as the remote rsync's wildcard expansion (``--secluded-args``) needs it: in every
    component holding ``*``, ``?`` or ``[``, those and ``]`` and ``\\`` get a backslash; other components
    stay literal. rsync matches each escaped component against what exists and falls back to the whole
    argument verbatim when nothing matches, so callers make sure every such component exists (a new
    destination file with such a name is written under :func:`staged_name` and renamed)."""
    parts = []
    for part in path.split("/"):
        if _GLOB.intersection(part):
            part = "".join("\\" + ch if ch in _GLOB_ESCAPE else ch for ch in part)
        parts.append(part)
    return "/".join(parts)


def remote_arg(host: str, path: str) -> str:
    """``host:path`` for rsync/scp (an IPv6 literal gets brackets)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{path}"


def ssh_prefix(argv: Sequence[str], host: str, remote: str) -> list[str]:
    """The ssh words before ``-- host remote`` of an argv built by ``SshArgs`` (so rsync/scp use exactly
    the options exec uses)."""
    words = list(argv)
    if words[-3:] != ["--", host, remote]:
        raise ValueError("unexpected ssh argv shape")
    return words[:-3]


def rsh_command(words: Sequence[str]) -> str:
    """One ``rsync -e`` string: rsync splits it on spaces and honours single quotes (a doubled ``'`` is
    a literal quote), no backslashes; so every word is single-quoted."""
    out = []
    for word in words:
        if any(ch in word for ch in "\n\r\x00"):
            raise InvalidRequest(field="ssh", reason="an ssh option holds a line break")
        out.append("'" + word.replace("'", "''") + "'")
    return " ".join(out)


def scp_options(prefix: Sequence[str]) -> list[str]:
    """Translate ssh words (``ssh_prefix``) into scp's: ``-p`` → ``-P``, ``-l U`` → ``-o User=U``,
    ``-S CP`` → ``-o ControlPath=CP``; ``-o``/``-F`` pass through; anything else is refused."""
    words = list(prefix)
    out: list[str] = []
    binary = words.pop(0)
    if binary != "ssh":
        out += ["-S", binary]
    it = iter(words)
    for word in it:
        if word in ("-o", "-F"):
            out += [word, next(it)]
        elif word == "-p":
            out += ["-P", next(it)]
        elif word == "-l":
            out += ["-o", f"User={next(it)}"]
        elif word == "-S":
            out += ["-o", f"ControlPath={next(it)}"]
        elif word == "-T":
            continue  # scp never asks for a tty
        else:
            raise ValueError(f"ssh option {word!r} has no scp translation")
    return out
