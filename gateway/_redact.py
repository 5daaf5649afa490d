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
rewritten.

Two mechanisms, applied together:

* **digesting by key** — values under sensitive keys (password, secret, token, key, credential, content,
  stdin, text, authorization, cookie) and every value of an ``env`` or ``headers`` mapping are replaced by
  ``{"len": N, "sha256_prefix": "..."}`` so an operator can correlate without the value being written;
  keys naming a file, path or directory (``token_file``, ``bearer_token_file``…) hold paths and stay;
* **pattern redaction** — every remaining string is scrubbed of ``password=…``, ``token=…``,
  ``api_key=…``, ``secret=…``, ``Authorization: Bearer|Basic|Token …`` and PEM private-key blocks, and of
  any *known secret* registered at runtime (the bearer token, upstream credentials).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Redactor", "digest"]

_SENSITIVE_KEY = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|(^|_)key$|api_?key|private_?key|credential|content|stdin|^text$|"
    r"^data$|authorization|cookie)",
    re.IGNORECASE,
)
_PATH_KEY = re.compile(r"_(file|path|dir)$", re.IGNORECASE)
_ALL_VALUES_SECRET = frozenset({"env", "environment", "headers"})
"""Mappings whose every value is sensitive whatever its key (``X-Api-Key``, ``PGPASSWORD``…)."""

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(-----END \1PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        "[REDACTED PRIVATE KEY]",
    ),
    (
        re.compile(r"(?i)(authorization\s*[:=]\s*(bearer|basic|token)\s+)[^\s\"',;]+"),
        r"\1[REDACTED]",
    ),
    (
        re.compile(
            r"(?i)\b((?:api[_-]?key|password|passwd|token|secret)\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s&,;]+)"
        ),
        r"\1[REDACTED]",
    ),
)


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
        for pattern, repl in _PATTERNS:
            value = pattern.sub(repl, value)
        for secret in self._known:
            if secret in value:
                value = value.replace(secret, "[REDACTED]")
        return value

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
            return {str(k): self.arguments(v, key=str(k), in_env=is_env) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.arguments(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def any(self, value: Any) -> Any:
        """Pattern-scrub every string in a structure (no key-based digesting)."""
        if isinstance(value, Mapping):
            return {str(k): self.any(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.any(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value
