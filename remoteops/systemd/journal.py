"""``journal_read``: ``journalctl -o json`` parsed entry by entry, never scraped, continued by cursor.

A read names a unit (optional), ``since``/``until`` (journalctl's time syntax, checked against a closed
pattern), a ``priority`` (0..7 or its name), a ``grep`` pattern (PCRE, one line), and at most ``lines``
entries. Without a cursor and without ``since`` it returns the *latest* ``lines`` entries; with
``cursor`` it returns the entries right after it (``--after-cursor``), oldest first, so that reading page
after page with the returned ``cursor`` loses and repeats no entry. When the output cap cut a page, the
cut entry is dropped and ``more`` is set: the cursor is that of the last whole entry.
"""

from __future__ import annotations

import json
import re

from remoteops._errors import InvalidRequest
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode, ProviderAttempt
from remoteops.requests import check_pattern_line
from remoteops.systemd.errors import SystemdCommandFailed, SystemdMissing
from remoteops.systemd.models import JournalEntry, JournalPage
from remoteops.systemd.names import check_unit
from remoteops.systemd.runner import SystemdRunner, denial, run_privileged

__all__ = ["MAX_LINES", "PRIORITIES", "read_journal"]

MAX_LINES = 1000
PRIORITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
_TIME = re.compile(
    r"^(?:now|today|yesterday|tomorrow|@\d{1,12}|[-+]?\d{1,6}\s?(?:us|ms|s|sec|min|m|h|d|w)(?: ago)?|"
    r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(?: UTC)?)$"
)
_CURSOR = re.compile(r"^[A-Za-z0-9=;_-]{1,512}$")


def _message(value: object) -> str:
    if isinstance(value, list):  # journald's binary MESSAGE: an array of byte values
        return bytes(int(b) & 0xFF for b in value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _entry(item: dict[str, object]) -> JournalEntry:
    return JournalEntry(
        cursor=str(item["__CURSOR"]),
        realtime_us=_int(item.get("__REALTIME_TIMESTAMP")),
        priority=_int(item.get("PRIORITY")),
        unit=str(item.get("_SYSTEMD_UNIT") or item.get("UNIT") or "") or None,
        identifier=str(item.get("SYSLOG_IDENTIFIER") or "") or None,
        pid=_int(item.get("_PID")),
        message=_message(item.get("MESSAGE")),
    )


async def read_journal(
    runner: SystemdRunner,
    target: str,
    *,
    unit: str | None = None,
    since: str | None = None,
    until: str | None = None,
    priority: str | int | None = None,
    grep: str | None = None,
    lines: int = 100,
    cursor: str | None = None,
    privilege: PrivilegeMode = "auto",
    escalate: bool = False,
    secrets: SecretSource | None = None,
) -> JournalPage:
    if not 1 <= lines <= MAX_LINES:
        raise InvalidRequest(target=target, field="lines", reason=f"must be in [1, {MAX_LINES}]")
    argv = ["journalctl", "--no-pager", "-o", "json", "--output-fields=" + ",".join(_FIELDS)]
    if unit is not None:
        argv.append(f"--unit={check_unit(unit, target=target)}")
    for name, value in (("since", since), ("until", until)):
        if value is not None:
            if not _TIME.fullmatch(value):
                raise InvalidRequest(target=target, field=name, reason="not a journalctl time")
            argv.append(f"--{name}={value}")
    if priority is not None:
        numeric = isinstance(priority, int) and not isinstance(priority, bool) and 0 <= priority <= 7
        if not (numeric or (isinstance(priority, str) and priority in PRIORITIES)):
            raise InvalidRequest(target=target, field="priority", reason="0..7 or " + ", ".join(PRIORITIES))
        argv.append(f"--priority={priority}")
    if grep is not None:
        check_pattern_line(grep, max_chars=500, field="grep", target=target)
        argv.append(f"--grep={grep}")
    if cursor is not None:
        if not _CURSOR.fullmatch(cursor):
            raise InvalidRequest(target=target, field="cursor", reason="not a journal cursor")
        argv.append(f"--after-cursor={cursor}")
    # one more than asked: whether there is more. With a cursor or since, -n counts forward from there.
    argv.append(f"--lines={lines + 1}")
    before: tuple[ProviderAttempt, ...] = ()
    if privilege == "auto":
        # journalctl -o json of a user who can open only some files (their own user journal) exits 0 and
        # silently shows less; in short output it says so. Ask once whether the system journal is readable.
        probe = await runner.run(
            target, ["journalctl", "--no-pager", "--system", "--lines=0"], privilege="user"
        )
        refused = denial(probe)
        if probe.exit_code == 127:
            raise SystemdMissing("journalctl is not installed", target=target, unit=unit, tool="journalctl")
        if refused is not None:
            before = (ProviderAttempt(provider="user", outcome="denied", reason=refused),)
    result, report = await run_privileged(
        runner, target, argv, privilege=privilege, escalate=escalate, secrets=secrets, before=before
    )
    if result.exit_code == 127:
        raise SystemdMissing("journalctl is not installed", target=target, unit=unit, tool="journalctl")
    if result.exit_code != 0 and not result.stdout:
        raise SystemdCommandFailed(
            f"journalctl exited {result.exit_code}: {result.stderr.strip()[-300:]}",
            target=target, unit=unit, stage="journalctl",
        )  # fmt: skip
    raw = result.stdout.split("\n")
    if result.stdout_truncated or not result.stdout.endswith("\n"):
        raw = raw[:-1]  # a line the cap cut (or an unterminated last one) is not an entry
    entries: list[JournalEntry] = []
    for line in raw:
        if not line.strip() or line.startswith("-- "):  # "-- No entries --" (not quiet: denials show)
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise SystemdCommandFailed(
                "journalctl printed a line that is not JSON", target=target, unit=unit, stage="journalctl"
            ) from None
        if isinstance(item, dict) and "__CURSOR" in item:
            entries.append(_entry(item))
    more = len(entries) > lines or result.stdout_truncated
    if len(entries) > lines:
        # tail mode (no cursor, no since) keeps the newest; forward mode the oldest
        entries = entries[-lines:] if cursor is None and since is None else entries[:lines]
    last = entries[-1].cursor if entries else cursor
    return JournalPage(target=target, entries=entries, cursor=last, more=more, privilege=report, argv=argv)


_FIELDS = (
    "__CURSOR", "__REALTIME_TIMESTAMP", "PRIORITY", "_SYSTEMD_UNIT", "UNIT", "SYSLOG_IDENTIFIER", "_PID",
    "MESSAGE",
)  # fmt: skip
