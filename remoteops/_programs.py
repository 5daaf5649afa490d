"""What the capabilities that keep programs on a target (tasks, sessions) share: one POSIX sh program run on
stdin under a bounded wait, the size of a base64 read, decoding a byte cursor's text, and reconciling the
recorded things with the target after a restart."""

from __future__ import annotations

import codecs
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar

import anyio
import structlog

from remoteops._errors import CommandTimeout, RemoteOpsError
from remoteops._models import ExecResult
from remoteops._runner import Runner

__all__ = ["base64_read_cap", "decode_text_prefix", "recover", "run_program"]

_PARALLEL = 4
_log = structlog.get_logger("remoteops.tasks")


async def run_program(
    runner: Runner, target: str, argv: Sequence[str], script: str, *, limit_s: float, grace_s: float
) -> ExecResult:
    """Run ``argv`` (``sh -s -- ...``) with ``script`` on stdin and the remote time limit ``limit_s``. The
    wait is bounded locally at ``limit_s + grace_s`` (a wedged carrier cannot hold it longer); reaching that
    bound is :class:`CommandTimeout`, like every other timeout of a remote command."""
    bound = limit_s + grace_s
    try:
        with anyio.fail_after(bound):
            return await runner.run(target, argv, stdin=script.encode(), timeout_s=limit_s)
    except TimeoutError:
        raise CommandTimeout(
            f"no answer from the program within {bound:.0f}s",
            target=target,
            time_limit_s=limit_s,
            remote_killed=False,
        ) from None


def base64_read_cap(output_cap_bytes: int) -> int:
    """Bytes a read may ask the target for: they come back base64 (4/3 larger) and the whole answer must fit
    inside the carrier's output cap, with room for its header lines."""
    return max(1024, (output_cap_bytes - 1024) * 3 // 4)


def decode_text_prefix(data: bytes, *, final: bool) -> tuple[str, int]:
    """Decode UTF-8, holding back an incomplete trailing character unless ``final``: (text, bytes used).
    Invalid bytes become U+FFFD and still count, so cursors never skip or repeat a byte. Bytes that are only
    the start of a character still being written give ``("", 0)``: the next read, once the rest has arrived
    (or the stream has ended, ``final``), returns the whole character — never replacement characters for a
    character cut in two. (Readers ask for at least 4 bytes, so a complete character always fits.)"""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=final)
    pending = len(decoder.getstate()[0])
    return text, len(data) - pending


class _Recorded(Protocol):
    @property
    def id(self) -> str: ...


RecordT = TypeVar("RecordT", bound=_Recorded)


async def recover(
    pending: Iterable[RecordT],
    check: Callable[[RecordT], Awaitable[object]],
    reconciling: set[str],
    *,
    event: str = "task_recover_failed",
) -> None:
    """Look at every pending record (task, session) once, a few at a time; ``reconciling`` holds the IDs not
    yet looked at. A target that cannot be reached leaves its records as they were: the next look decides."""
    todo = list(pending)
    reconciling.update(r.id for r in todo)
    limiter = anyio.Semaphore(_PARALLEL)

    async def one(record: RecordT) -> None:
        async with limiter:
            try:
                await check(record)
            except (RemoteOpsError, TimeoutError) as exc:
                _log.warning(event, record=record.id, error=type(exc).__name__)
            finally:
                reconciling.discard(record.id)

    async with anyio.create_task_group() as tg:
        for record in todo:
            tg.start_soon(one, record)
