"""Upkeep of tasks: command checks before a start, reconciling recorded tasks with the target after a
restart, retention."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import anyio
import structlog

from remoteops.requests import check_argv, check_env, check_text, command_words
from remoteops.tasks.models import FINISHED, TaskRecord

__all__ = ["checked_command", "expired", "retention_loop"]

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
    words = command_words(argv, shell, target=target)
    if shell is not None:
        check_text("shell", shell, target=target)
    else:
        check_argv(words, target=target)
    if cwd is not None:
        check_text("cwd", cwd, target=target)
    return words, check_env(env, target=target)


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
