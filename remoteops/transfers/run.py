"""Running rsync and scp as supervised children and reading what they say.

rsync is asked for machine-readable output: ``--info=progress2 --no-h --outbuf=L`` (a running byte count,
about once a second, ``\\r``-terminated), ``--out-format='%i %n'`` (one itemized line per change; rsync
escapes unprintable bytes of names as ``\\#ooo``) and ``--stats`` (literal and matched data at the end).
Every process runs in its own process group (:func:`remoteops._process.supervised_child`): rsync starts
ssh, and on cancellation the whole group is terminated and reaped.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc

from remoteops._capture import HeadTail
from remoteops._errors import AuthError, ConnectError, HostKeyError, RemoteOpsError
from remoteops._process import supervised_child
from remoteops.ssh.args import classify_ssh_failure
from remoteops.transfers.errors import TransferCapabilityMissing, TransferFailed
from remoteops.transfers.models import ItemChange, ProgressHook

__all__ = ["RunOutcome", "failure", "parse_item", "run_tool"]

_CHUNK = 65536
_PROGRESS = re.compile(rb"^\s*(\d+)\s+(\d{1,3})%\s")
_STATS = {
    "literal": re.compile(rb"^Literal data: (\d+) bytes"),
    "matched": re.compile(rb"^Matched data: (\d+) bytes"),
    "total_size": re.compile(rb"^Total file size: (\d+) bytes"),
    "files_transferred": re.compile(rb"^Number of regular files transferred: (\d+)"),
    "files": re.compile(rb"^Number of files: \d+ \(reg: (\d+)"),
    "files_only": re.compile(rb"^Number of files: (\d+)$"),
    "deleted": re.compile(rb"^Number of deleted files: (\d+)"),
}
_ESCAPED = re.compile(rb"\\#([0-7]{3})")
_KINDS = {"f": "file", "d": "dir", "L": "symlink", "D": "device", "S": "special"}
_SSH_FAILURE = (HostKeyError, AuthError, ConnectError)


@dataclass
class RunOutcome:
    returncode: int
    stats: dict[str, int] = field(default_factory=dict)
    changes: list[ItemChange] = field(default_factory=list)
    changes_total: int = 0
    deleted: list[str] = field(default_factory=list)
    deleted_total: int = 0
    last_done: int = 0
    stderr: str = ""
    duration_s: float = 0.0


def _decode_name(raw: bytes) -> str:
    return _ESCAPED.sub(lambda m: bytes([int(m.group(1), 8)]), raw).decode("utf-8", "replace")


def parse_item(line: bytes) -> ItemChange | None:
    """One ``%i %n`` line, or None when the line is not one."""
    if line.startswith(b"*deleting"):
        return ItemChange(path=_decode_name(line[12:]), code="*deleting", kind="other", action="deleted")
    if len(line) < 13 or line[11:12] != b" " or line[0:1] not in b"<>ch.*" or line[1:2] not in b"fdLDS":
        return None
    code = line[:11].decode("ascii", "replace")
    name = _decode_name(line[12:])
    kind = _KINDS.get(code[1], "other")
    if code[0] == "*":
        action = "message"
    elif code[0] == "h":
        action = "hardlink"
    elif "+++++++++" in code:
        action = "created"
    elif code[0] in "<>c":
        action = "updated"
    else:
        action = "attributes"
    return ItemChange(path=name, code=code, kind=kind, action=action)


class _Reader:
    def __init__(self, max_changes: int, progress: ProgressHook | None, total: int | None, every_s: float):
        self.out = RunOutcome(returncode=-1)
        self._max = max_changes
        self._progress = progress
        self._total = total
        self._every = every_s
        self._last_sent = 0.0
        self._buf = b""

    async def feed(self, data: bytes) -> None:
        self._buf += data
        *lines, self._buf = re.split(rb"[\r\n]", self._buf)
        for line in lines:
            await self._line(line)

    async def finish(self) -> None:
        if self._buf:
            await self._line(self._buf)
            self._buf = b""

    async def _line(self, line: bytes) -> None:
        if not line:
            return
        m = _PROGRESS.match(line)
        if m:
            self.out.last_done = int(m.group(1))
            now = time.monotonic()
            if self._progress is not None and now - self._last_sent >= self._every:
                self._last_sent = now
                await self._progress(self.out.last_done, self._total)
            return
        for key, rx in _STATS.items():
            sm = rx.match(line)
            if sm:
                self.out.stats[key] = int(sm.group(1))
                return
        item = parse_item(line)
        if item is None:
            return
        if item.action == "deleted":
            self.out.deleted_total += 1
            if len(self.out.deleted) < self._max:
                self.out.deleted.append(item.path)
        self.out.changes_total += 1
        if len(self.out.changes) < self._max:
            self.out.changes.append(item)


async def run_tool(
    argv: Sequence[str],
    *,
    max_changes: int,
    progress: ProgressHook | None,
    total: int | None,
    every_s: float,
    stdin: bytes | None = None,
) -> RunOutcome:
    """Run rsync/scp to completion, parsing its stdout; cancellation terminates and reaps its group."""
    reader = _Reader(max_changes, progress, total, every_s)
    err = HeadTail(4096, 8192)
    started = time.monotonic()
    stdin_mode = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
    async with supervised_child(argv, stdin=stdin_mode) as proc:

        async def pump_err() -> None:
            if proc.stderr is None:
                return
            try:
                while True:
                    err.feed(await proc.stderr.receive(_CHUNK))
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

        async def feed_in() -> None:
            if proc.stdin is None or stdin is None:
                return
            try:
                await proc.stdin.send(stdin)
                await proc.stdin.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
                return

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_err)
            tg.start_soon(feed_in)
            if proc.stdout is not None:
                try:
                    while True:
                        await reader.feed(await proc.stdout.receive(_CHUNK))
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
            await reader.finish()
            returncode = await proc.wait()
    reader.out.returncode = returncode
    reader.out.duration_s = time.monotonic() - started
    reader.out.stderr = (err.head + (b"\n...\n" if err.gap else b"") + err.tail).decode("utf-8", "replace")
    return reader.out


def failure(outcome: RunOutcome, *, target: str, stage: str, tool: str) -> RemoteOpsError:
    """The exception for a non-zero exit: ssh's own failure when ssh said so, else TransferFailed."""
    stderr = outcome.stderr
    if outcome.returncode in (12, 255) or "connection unexpectedly closed" in stderr:
        error = classify_ssh_failure(stderr, target=target, stage=stage, command_started=None)
        if isinstance(error, _SSH_FAILURE):
            return error
    if outcome.returncode == 127 or "command not found" in stderr:
        return TransferCapabilityMissing(
            f"{tool} is not available on the target: {stderr.strip()[-300:]}",
            target=target,
            capability=tool,
            side="remote",
        )
    return TransferFailed(
        f"{tool} exited {outcome.returncode}: {stderr.strip()[-600:]}",
        target=target,
        stage=stage,
        exit_code=outcome.returncode,
    )
