"""The one redaction path for everything that leaves the process.

One :class:`Redactor` per process (built by the command line, held by the runtime), and exactly these
pass through it:

* **error details returned to clients** — message and details of every ``isError`` result the gateway
  makes (they carry ssh's stderr and upstream messages): ``Redactor.any`` in ``_dispatch.error_result``;
* **logs** — every structlog event and stdlib log line on stderr (``_logging``);
* **audit records** — tool arguments by ``Redactor.arguments``, the rest of each record by ``Redactor.any``
  (``_audit``);
* **``config check``** — the printed effective configuration, by ``Redactor.arguments`` (``cli``);
* **health** — the whole ``gateway_health`` answer (last errors of upstreams, audit, transport and
  forwards; state-store problems), by ``Redactor.any`` (``tools/health``).

Successful tool results (a command's stdout, a relayed tool's answer) are the caller's data and are not
rewritten — unless ``[redaction] output = "mask"``: then own tools' results pass :meth:`Redactor.scrub_any`
(``_dispatch.scrub_output``), counted in the result's ``_meta`` (``remoteops-gateway/redacted``), base64
reads untouched; relayed results pass through untouched by design.

Two mechanisms, applied together:

* **digesting by key** — values under sensitive keys (password, secret, token, key, credential, content,
  stdin, text, authorization, cookie) and every value of an ``env`` or ``headers`` mapping are replaced by
  ``{"len": N, "sha256_prefix": "..."}`` so an operator can correlate without the value being written;
  keys naming a file, path or directory (``token_file``, ``bearer_token_file``…) hold paths and stay;
* **pattern redaction** — every remaining string is scrubbed of the well-known credential shapes
  (:data:`_SHAPES`: PEM/PGP private keys, ``Authorization``/``Bearer`` tokens, JWTs, AWS key ids, GitHub,
  GitLab, Slack, Google and Stripe tokens, ``user:password@`` in URLs, ``NAME=value`` where the name holds
  password/secret/token/api_key/access_key/credential — ``AWS_SECRET_ACCESS_KEY=…`` too), and of any *known
  secret* registered at runtime (the bearer token, upstream credentials, the audit MAC key).

Mapping keys pass the pattern redaction like values (a stray field named after a secret is one).

Audit arguments are also bounded (:meth:`Redactor.audit_arguments`): strings over 4096 characters and
argument sets over :data:`MAX_AUDIT_ARGUMENTS` as JSON are recorded as digests.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MAX_AUDIT_ARGUMENTS", "Redactor", "digest"]

_SENSITIVE_KEY = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|(^|_)key$|api_?key|private_?key|credential|content|stdin|^text$|"
    r"^data$|authorization|cookie)",
    re.IGNORECASE,
)
_PATH_KEY = re.compile(r"_(file|path|dir)$", re.IGNORECASE)
_ALL_VALUES_SECRET = frozenset({"env", "environment", "headers"})
"""Mappings whose every value is sensitive whatever its key (``X-Api-Key``, ``PGPASSWORD``…)."""

_ASSIGN_WORD = re.compile(
    r"(?i)api[_-]?key|access[_-]?key|private[_-]?key|password|passwd|passphrase|token|secret|credential"
)
_ASSIGN_NAME = r"[A-Za-z0-9_.-]{1,128}"
"""A name before ``=``/``:``; it is an assignment of a secret when :data:`_ASSIGN_WORD` is in it (checked
on the match: a pattern with the words inside the name backtracks quadratically on long words)."""
_VALUE_AT = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|[^\s&,;\"']+")

_SHAPES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END \1PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        "[REDACTED PRIVATE KEY]",
    ),
    (
        "authorization",
        re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|basic|token)\s+)[^\s\"',;]+"),
        r"\1[REDACTED]",
    ),
    ("bearer", re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/-]{16,}=*"), r"\1[REDACTED]"),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}"), "[REDACTED JWT]"),
    (
        "aws_access_key_id",
        re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}\b"),
        "[REDACTED AWS KEY ID]",
    ),
    (
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"),
        "[REDACTED]",
    ),
    ("gitlab_token", re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}"), "[REDACTED]"),
    ("slack_token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), "[REDACTED]"),
    (
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
        "https://hooks.slack.com/services/[REDACTED]",
    ),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "[REDACTED]"),
    ("stripe_key", re.compile(r"\b[sr]k_live_[0-9A-Za-z]{20,}"), "[REDACTED]"),
    (
        "url_credentials",
        re.compile(r"\b([a-z][a-z0-9+.-]*://[^/\s:@\"']+:)[^/\s@\"']+(@)"),
        r"\1[REDACTED]\2",
    ),
    (
        "assignment",
        re.compile(r"(?<![A-Za-z0-9_.-])(" + _ASSIGN_NAME + r")[\"']?\s*[=:]\s*"),
        r"\1[REDACTED]",
    ),
)
"""The well-known credential shapes: (kind, pattern, replacement). Shared by every redacted output —
logs, audit records, error details — and by the opt-in output scrubbing (``[redaction] output``)."""

_HINTS: dict[str, tuple[str, ...]] = {
    "private_key": ("private key",),
    "authorization": ("authorization",),
    "bearer": ("bearer",),
    "jwt": ("eyj",),
    "aws_access_key_id": ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa", "abia", "acca"),
    "github_token": ("gh", "github_pat_"),
    "gitlab_token": ("gl",),
    "slack_token": ("xox",),
    "slack_webhook": ("hooks.slack.com",),
    "google_api_key": ("aiza",),
    "stripe_key": ("k_live_",),
    "url_credentials": ("://",),
    "assignment": ("key", "pass", "token", "secret", "credential"),
}
"""Lower-case substrings one of which a text must hold for a shape's pattern to be tried at all."""


def _assignments(pattern: re.Pattern[str], value: str) -> tuple[str, int]:
    """Mask the value after every ``name=``/``name:`` whose name holds a secret word; other names are
    passed over (only the name and its ``=`` consumed: ``stderr: AWS_SECRET=…`` is still found)."""
    out: list[str] = []
    count = pos = 0
    for match in pattern.finditer(value):
        if match.start() < pos or _ASSIGN_WORD.search(match.group(1)) is None:
            continue
        secret = _VALUE_AT.match(value, match.end())
        if secret is None:
            continue
        out += [value[pos : match.end()], "[REDACTED]"]
        pos = secret.end()
        count += 1
    if not count:
        return value, 0
    out.append(value[pos:])
    return "".join(out), count


_MAX_AUDIT_STRING = 4096
"""An argument string longer than this (characters) is recorded as its digest only."""
MAX_AUDIT_ARGUMENTS = 16 * 1024
"""The redacted arguments of one record, as JSON, at most this many characters; else their digest."""


def digest(value: Any) -> dict[str, Any]:
    """``{len, sha256_prefix}`` of a value (strings and bytes as-is, anything else by its repr)."""
    if isinstance(value, bytes):
        raw = value
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
    else:
        raw = repr(value).encode("utf-8", "replace")
    return {"len": len(raw), "sha256_prefix": hashlib.sha256(raw).hexdigest()[:12]}


class Redactor:
    """Redacts structures; knows the process's own secrets (registered once, never logged)."""

    def __init__(self, known_secrets: Iterable[str] = ()) -> None:
        self._known: set[str] = set()
        for secret in known_secrets:
            self.add_secret(secret)

    def add_secret(self, secret: str) -> None:
        if len(secret) >= 6:  # shorter strings would redact ordinary words
            self._known.add(secret)

    def forget_secret(self, secret: str) -> None:
        """Drop a secret that lived only for one use (an entered password), so it is not kept forever."""
        self._known.discard(secret)

    def text(self, value: str) -> str:
        return self.scrub(value)[0]

    def scrub(self, value: str) -> tuple[str, dict[str, int]]:
        """``value`` with every credential shape and known secret masked, and how many of each kind."""
        kinds: dict[str, int] = {}
        lowered = value.lower()
        for kind, pattern, repl in _SHAPES:
            if not any(hint in lowered for hint in _HINTS[kind]):
                continue  # a substring test first: most text has none of the shapes
            if kind == "assignment":
                value, count = _assignments(pattern, value)
            else:
                value, count = pattern.subn(repl, value)
            if count:
                kinds[kind] = kinds.get(kind, 0) + count
        for secret in tuple(self._known):  # a snapshot: the log writer thread scrubs while the loop adds
            if secret in value:
                kinds["gateway_secret"] = kinds.get("gateway_secret", 0) + value.count(secret)
                value = value.replace(secret, "[REDACTED]")
        return value, kinds

    def scrub_any(self, value: Any, kinds: dict[str, int]) -> Any:
        """:meth:`scrub` over every string of a structure; the counts are added to ``kinds``."""
        if isinstance(value, str):
            out, found = self.scrub(value)
            for kind, count in found.items():
                kinds[kind] = kinds.get(kind, 0) + count
            return out
        if isinstance(value, Mapping):
            return {
                self.scrub_any(k, kinds) if isinstance(k, str) else k: self.scrub_any(v, kinds)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.scrub_any(v, kinds) for v in value]
        return value

    def audit_arguments(self, value: Any) -> Any:
        """Tool arguments as an audit record holds them: :meth:`arguments`, long strings digested, and
        the whole digested when its JSON is still longer than :data:`MAX_AUDIT_ARGUMENTS`."""
        out = self.arguments(value)
        try:
            size = len(json.dumps(out, ensure_ascii=False, default=repr))
        except (TypeError, ValueError):
            size = MAX_AUDIT_ARGUMENTS + 1
        if size <= MAX_AUDIT_ARGUMENTS:
            return out
        return {"capped": True, **digest(json.dumps(value, default=repr, sort_keys=True))}

    @staticmethod
    def digest_values(arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Every argument value as its digest (``None`` and booleans as they are): relayed arguments,
        whose meaning the gateway does not know (the ``keys`` of a terminal's ``send_keys``)."""
        return {str(k): v if v is None or isinstance(v, bool) else digest(v) for k, v in arguments.items()}

    @staticmethod
    def sensitive_key(key: str) -> bool:
        """Whether values under ``key`` are digested as secrets (paths excepted)."""
        return bool(_SENSITIVE_KEY.search(key)) and not _PATH_KEY.search(key)

    def arguments(self, value: Any, *, key: str | None = None, in_env: bool = False) -> Any:
        """Redact tool arguments: digest sensitive keys and env values, pattern-scrub the rest."""
        if in_env and key is not None:
            return digest(value)
        sensitive = key is not None and _SENSITIVE_KEY.search(key) and not _PATH_KEY.search(key)
        if sensitive and not isinstance(value, (bool, int, float)):
            if value is None:
                return None
            return digest(value)
        if isinstance(value, Mapping):
            is_env = key is not None and key.lower() in _ALL_VALUES_SECRET
            # the names are scrubbed too: a caller's stray field (``{"<secret>": 1}``) is a value in disguise
            return {self.text(str(k)): self.arguments(v, key=str(k), in_env=is_env) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.arguments(v) for v in value]
        if isinstance(value, str):
            if len(value) > _MAX_AUDIT_STRING:
                return {"capped": True, **digest(value)}
            return self.text(value)
        return value

    def any(self, value: Any) -> Any:
        """Pattern-scrub every string in a structure (no key-based digesting)."""
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.any(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.any(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value
