"""Upkeep of tasks: command checks before a start, reconciling recorded tasks with the target after a
restart, retention."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import anyio
import structlog

from remoteops._errors import InvalidRequest
from remoteops.tasks.models import FINISHED, TaskRecord

__all__ = ["checked_command", "expired", "retention_loop"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_log = structlog.get_logger("remoteops.tasks")


def checked_command(
    argv: Sequence[str] | None,
    shell: str | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    *,
    target: str | None = None,
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The words to exec and the environment, or :class:`InvalidRequest` naming the field (nothing is
    recorded or run then): the rules ``remote_exec`` applies, without its command-line length limit (a
    task's command travels on stdin)."""
    if (argv is None) == (shell is None):
        raise InvalidRequest(target=target, field="argv", reason="give exactly one of argv or shell")
    if shell is not None:
        _check_text(target, "shell", shell)
        words: tuple[str, ...] = ("sh", "-c", shell)
    else:
        words = tuple(argv or ())
        if not words:
            raise InvalidRequest(target=target, field="argv", reason="must not be empty")
        if not words[0]:
            raise InvalidRequest(target=target, field="argv[0]", reason="the program name must not be empty")
        for index, word in enumerate(words):
            _check_text(target, f"argv[{index}]", word)
    if cwd is not None:
        _check_text(target, "cwd", cwd)
    checked = dict(env or {})
    for name, value in checked.items():
        if not _ENV_NAME.fullmatch(name):
            raise InvalidRequest(
                target=target,
                field=f"env.{ascii(name)[1:-1][:64]}",
                reason="invalid environment variable name (must match [A-Za-z_][A-Za-z0-9_]*)",
            )
        _check_text(target, f"env.{name}", value)
    return words, checked


def _check_text(target: str | None, field: str, value: str) -> None:
    if "\0" in value:
        raise InvalidRequest(target=target, field=field, reason="contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        reason = "is not valid UTF-8 (lone surrogate)"
        raise InvalidRequest(target=target, field=field, reason=reason) from None


def expired(records: Iterable[TaskRecord], retention_s: float, now: float) -> dict[str, list[TaskRecord]]:
    """Finished tasks older than the retention age, by target."""
    by_target: dict[str, list[TaskRecord]] = {}
    for record in records:
        if record.state in FINISHED and (record.finished_at or record.created_at) + retention_s <= now:
            by_target.setdefault(record.target, []).append(record)
    return by_target


async def retention_loop(purge: Callable[[], Awaitable[list[str]]], interval_s: float) -> None:
    while True:
        try:
            purged = await purge()
            if purged:
                _log.info("tasks_purged", count=len(purged))
        except Exception as exc:  # a bad pass must not end retention for the life of the process
            _log.warning("task_purge_error", error=type(exc).__name__)
        await anyio.sleep(interval_s)
