"""``remoteops-gateway audit verify``: walk the audit files (oldest rotated first) and check the chain.

Reports the **first** problem, by kind, file, byte offset and sequence number:

* ``edited`` — a record whose MAC does not verify against its predecessor (a changed byte, or a record
  replaced);
* ``inserted`` — a record that does not verify while the one after it verifies against the one before;
* ``deleted`` — sequence numbers missing between two records;
* ``reordered`` — a sequence number out of order (a later record found where an earlier one belongs);
* ``unsealed_line`` — a line that is not a sealed record where none may be (not a crash's torn line the
  gateway accounted for at its next start, not old records before a recorded new epoch);
* ``truncated_tail`` — the last line is torn, the head names records past the end, or the gateway found
  a dropped tail when it started (recorded in the chain as ``lost_from_seq`` … ``lost_to_seq``);
* ``broken_rotation_link`` — a rotation header whose link is not the previous file's last MAC;
* ``missing_file`` — a rotated file missing between two others, or (with ``backups`` known) fewer
  rotated files than kept while the oldest one starts with a rotation header;
* ``unverifiable_start`` — the walk starts with a record that links to one not present (no rotation
  header, no epoch: records removed from the front);
* ``head_missing`` / ``head_unverifiable`` / ``head_mismatch`` — the head (``audit.head``) is gone, not
  genuine, or names a MAC the record of its sequence number does not have.

Exit codes of the command: 0 intact, 1 a problem found (tampered or incomplete), 2 usage (no key, no
files, unreadable). Cost: one HMAC per line, no JSON parsing except of chain headers and notes.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway.audit.chain import GENESIS, HeadFile, mac_of, parse_sealed

__all__ = ["Finding", "Report", "audit_files", "verify_files", "verify_lines"]

_HEADER = b'{"event": "audit_chain"'
_NOTE = b', "chain": {'
_LOOKAHEAD = 10_000


@dataclass(frozen=True)
class Finding:
    kind: str
    file: str
    offset: int | None
    seq: int | None
    detail: str


@dataclass
class Report:
    files: list[str] = field(default_factory=list)
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    epochs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: Finding | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


@dataclass(slots=True)
class _Entry:
    file: str
    offset: int
    line: bytes
    complete: bool
    first_in_file: bool


def audit_files(path: Path) -> tuple[list[Path], list[str]]:
    """The live file and its rotated files, oldest first; and the names of rotated files missing
    between the oldest present and the live one."""
    indices = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            indices.append(int(suffix))
    indices.sort()
    missing = [f"{path.name}.{i}" for i in range(1, indices[-1]) if i not in indices] if indices else []
    files = [path.with_name(f"{path.name}.{i}") for i in reversed(indices)]
    if path.exists():
        files.append(path)
    return files, missing


def _entries(name: str, data: bytes) -> list[_Entry]:
    if not data:
        return []
    parts = data.split(b"\n")
    torn = parts.pop()  # b"" when the data ends with a newline
    out: list[_Entry] = []
    offset = 0
    for line in parts:
        out.append(_Entry(name, offset, line, True, offset == 0))
        offset += len(line) + 1
    if torn:
        out.append(_Entry(name, offset, torn, False, offset == 0))
    return out


def _note(body: bytes) -> dict[str, Any] | None:
    at = body.find(_NOTE)
    if at < 0:
        return None
    end = body.rfind(b', "seq": ')
    try:
        note = json.loads(body[at + len(_NOTE) - 1 : end])
    except ValueError:
        return None
    return note if isinstance(note, dict) else None


def _header(body: bytes) -> dict[str, Any] | None:
    if not body.startswith(_HEADER):
        return None
    try:
        header = json.loads(body + b"}")
    except ValueError:
        return None
    return header if isinstance(header, dict) and header.get("kind") == "rotation" else None


class _Walk:
    def __init__(self, key: bytes, entries: list[_Entry], report: Report, *, backups: int | None) -> None:
        self._key = key
        self._entries = entries
        self._report = report
        self._backups = backups
        self.last_mac: bytes | None = None
        self.last_seq: int | None = None
        self.macs: dict[int, bytes] = {}

    def _fail(self, kind: str, entry: _Entry, seq: int | None, detail: str) -> Report:
        self._report.problem = Finding(kind, entry.file, entry.offset, seq, detail)
        return self._report

    def _verifies(self, previous: bytes, index: int, seq: int) -> bool:
        entry = self._entries[index]
        parsed = parse_sealed(entry.line) if entry.complete else None
        return (
            parsed is not None
            and parsed[1] == seq
            and hmac.compare_digest(mac_of(self._key, previous, parsed[0]), parsed[2])
        )

    def _seq_at(self, index: int) -> int | None:
        entry = self._entries[index]
        parsed = parse_sealed(entry.line) if entry.complete else None
        return parsed[1] if parsed is not None else None

    def run(self, *, rotated_files: int) -> Report:
        report, entries = self._report, self._entries
        junk: _Entry | None = None
        for index, entry in enumerate(entries):
            parsed = parse_sealed(entry.line) if entry.complete else None
            if parsed is None:
                if not entry.complete and index == len(entries) - 1:
                    return self._fail("truncated_tail", entry, None, "the last line is torn (cut mid-record)")
                junk = junk or entry
                continue
            body, seq, mac = parsed
            note = _note(body) if _NOTE in body else None
            header = _header(body)
            previous: bytes
            if note is not None and note.get("epoch"):
                previous = GENESIS.encode("ascii")
                if self.last_seq is not None and seq <= self.last_seq:
                    return self._fail(
                        "reordered", entry, seq, f"new epoch at seq {seq} after seq {self.last_seq}"
                    )
                head_seq = note.get("head_seq")
                if self.last_seq is not None and isinstance(head_seq, int) and head_seq != self.last_seq:
                    return self._fail(
                        "deleted",
                        entry,
                        seq,
                        f"records {self.last_seq + 1}..{head_seq} missing before a new epoch",
                    )
                report.epochs.append({"seq": seq, "file": entry.file, "offset": entry.offset, **note})
                if junk is not None:
                    report.notes.append(
                        f"unsealed lines before the epoch at seq {seq} ({junk.file}:{junk.offset})"
                    )
            elif self.last_mac is None:
                if junk is not None:
                    return self._fail(
                        "unsealed_line", junk, None, "the walk starts with a line that is not sealed"
                    )
                if header is not None:
                    previous = str(header.get("previous_last_mac", "")).encode("ascii")
                    report.notes.append(
                        f"records up to seq {header.get('previous_last_seq')} were rotated away "
                        f"before {entry.file}"
                    )
                    if self._backups is not None and rotated_files < self._backups and len(report.files) > 1:
                        return self._fail(
                            "missing_file",
                            entry,
                            seq,
                            f"{rotated_files} rotated file(s) of {self._backups} kept, and the oldest "
                            "follows a rotation: the oldest rotated file is missing",
                        )
                elif seq == 0:
                    previous = GENESIS.encode("ascii")
                else:
                    return self._fail(
                        "unverifiable_start",
                        entry,
                        seq,
                        f"the first record (seq {seq}) links to a record that is not here: "
                        "records were removed from the front",
                    )
            else:
                assert self.last_seq is not None  # noqa: S101 - set together with last_mac
                if junk is not None and not (note is not None and note.get("after_torn_line")):
                    return self._fail("unsealed_line", junk, None, "a line that is not a sealed record")
                if header is not None and str(header.get("previous_last_mac", "")).encode() != self.last_mac:
                    return self._fail(
                        "broken_rotation_link",
                        entry,
                        seq,
                        f"{entry.file} does not start where the previous file ended (seq {self.last_seq})",
                    )
                expected = self.last_seq + 1
                if seq != expected:
                    lost_from = note.get("lost_from_seq") if note else None
                    if lost_from == expected:
                        return self._fail(
                            "truncated_tail",
                            entry,
                            seq,
                            f"records {expected}..{seq - 1} were cut from the end of the log "
                            "(found at restart)",
                        )
                    later = range(index + 1, min(len(entries), index + _LOOKAHEAD))
                    if seq > expected and not any(self._seq_at(i) == expected for i in later):
                        return self._fail("deleted", entry, seq, f"records {expected}..{seq - 1} are missing")
                    return self._fail("reordered", entry, seq, f"seq {seq} where seq {expected} belongs")
                previous = self.last_mac
            if not hmac.compare_digest(mac_of(self._key, previous, body), mac):
                if (
                    self.last_mac is not None
                    and self.last_seq is not None
                    and index + 1 < len(entries)
                    and self._verifies(self.last_mac, index + 1, seq)
                ):
                    return self._fail("inserted", entry, seq, "a record the gateway did not write")
                return self._fail("edited", entry, seq, "the record's MAC does not verify")
            junk = None
            self.last_mac, self.last_seq = mac, seq
            self.macs[seq] = mac
            report.records += 1
            if report.first_seq is None:
                report.first_seq = seq
            report.last_seq = seq
        if junk is not None:
            return self._fail("unsealed_line", junk, None, "lines after the last sealed record")
        return report


def _check_head(report: Report, walk: _Walk, head_file: Path, key: bytes) -> Report:
    where = str(head_file)
    try:
        head = HeadFile(head_file, key).read()
    except ValueError as exc:
        report.problem = Finding("head_unverifiable", where, None, None, str(exc))
        return report
    if head is None:
        if report.records:
            report.problem = Finding(
                "head_missing", where, None, None, "no head: records cut from the end could not be detected"
            )
        return report
    last = report.last_seq if report.last_seq is not None else -1
    if head.seq > last:
        report.problem = Finding(
            "truncated_tail",
            report.files[-1] if report.files else where,
            None,
            last + 1,
            f"records {last + 1}..{head.seq} were written but are not in the log",
        )
    elif head.seq in walk.macs and walk.macs[head.seq].decode("ascii") != head.mac:
        report.problem = Finding("head_mismatch", where, None, head.seq, "the head names another record")
    elif head.seq < last:
        report.notes.append(f"the head lags (seq {head.seq} of {last}): the gateway stopped mid-batch")
    return report


def verify_files(
    path: Path, key: bytes, *, head_file: Path | None = None, backups: int | None = None
) -> Report:
    """Verify ``path`` and its rotated files (oldest first), and the head when ``head_file`` is given."""
    files, missing = audit_files(path)
    report = Report(files=[str(f) for f in files])
    if missing:
        report.problem = Finding(
            "missing_file", missing[0], None, None, f"rotated file {missing[0]} is missing"
        )
        return report
    entries: list[_Entry] = []
    for file in files:
        entries += _entries(file.name, file.read_bytes())
    walk = _Walk(key, entries, report, backups=backups)
    walk.run(rotated_files=len(files) - (1 if path.exists() else 0))
    if report.problem is None and head_file is not None:
        _check_head(report, walk, head_file, key)
    return report


def verify_lines(lines: list[bytes], key: bytes, *, name: str = "collector") -> Report:
    """Verify records as a collector received them, in sequence order (each line without or with its
    newline); the first may be a rotation header or an epoch, or seq 0."""
    entries = [_Entry(name, index, line.rstrip(b"\n"), True, index == 0) for index, line in enumerate(lines)]
    report = Report(files=[name])
    _Walk(key, entries, report, backups=None).run(rotated_files=0)
    return report
