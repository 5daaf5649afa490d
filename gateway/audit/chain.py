"""The audit chain: every audit line sealed with a sequence number and a keyed hash of it and its predecessor.

A sealed line is the record's JSON object with two last members, exactly so::

    {"event": "tool_call", ..., "seq": 41, "mac": "<64 hex>"}

``mac = HMAC-SHA256(key, previous_mac ‖ "\\n" ‖ body)`` where ``body`` is the line's exact bytes up to (not
including) ``, "mac": "`` — so the MAC covers every byte of the record, its sequence number included, and
the verifier needs no JSON parsing to check it (``gateway.audit.verify``). ``previous_mac`` is the MAC of
the line before in the chain, or 64 zeros at the start of a chain (an *epoch*).

Lines the gateway writes about the chain itself (``"event": "audit_chain"``):

* ``kind: "rotation"`` — the first line of every file a rotation starts: names the previous file's last
  sequence number and MAC (the link a verifier checks, and the start of a walk whose older files were
  rotated away).

And, in the first record written after a start that could not simply continue, a ``"chain"`` member:

* ``{"epoch": "new", "reason": ...}`` — a new chain (``previous_mac`` = zeros): no sealed record was found
  to continue from (``unsealed_records``: the file holds records of a version without a chain;
  ``previous_records_missing``: the head says there were records, none is left);
* ``{"after_torn_line": true}`` — the last line of the file was torn (a crash mid-write): the chain
  continues from the last whole record and the torn line is accounted for;
* ``{"lost_from_seq": a, "lost_to_seq": b}`` — the head says records up to ``b`` were written but the file
  ends at ``a - 1``: a dropped tail, found at start, recorded (the verifier reports it), never silent.

The **head** (``<state_dir>/audit.head``, 0600) holds the last sealed sequence number and MAC, itself
MAC'd; it is rewritten after each batch, so a verifier detects records cut from the end of the file (the
one tampering a chain alone cannot show). The **key** (``<state_dir>/audit.key``, 0600, 32 random bytes
as hex, made once on first start; or ``[audit] key_file``, e.g. a systemd credential, never created)
never leaves the process: it is registered with the redactor and shown nowhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway._errors import ConfigError

__all__ = [
    "GENESIS",
    "Chain",
    "Head",
    "HeadFile",
    "load_key",
    "mac_of",
    "parse_sealed",
]

GENESIS = "0" * 64
"""The ``previous_mac`` of the first record of a chain (an epoch)."""
_MAC_OPEN = b', "mac": "'
_SUFFIX_LEN = len(_MAC_OPEN) + 64 + 2  # , "mac": "<64 hex>"}
_SEQ_OPEN = b', "seq": '
_HEX = re.compile(rb"^[0-9a-f]{64}$")
_MODE = 0o600
_TAIL_READ = 1 << 20
"""How far back from the end of a file a restart looks for the last whole record."""


def load_key(path: Path, *, create: bool) -> bytes:
    """The MAC key in ``path`` (64 hex characters), made there (0600, exclusively) when absent and
    ``create``. A key readable by group or others, or of the wrong shape, is a ConfigError."""
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):  # a concurrent first start made it: use that one
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _MODE)
            try:
                os.fchmod(fd, _MODE)
                os.write(fd, secrets.token_hex(32).encode("ascii") + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
    try:
        st = path.stat()
        text = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the audit key: {exc.strerror or exc}", key="audit.key_file") from None
    if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
        raise ConfigError(
            "audit key file must not be readable by group or others (chmod 600)", key="audit.key_file"
        )
    if not _HEX.match(text.lower()):
        raise ConfigError("audit key file must hold 64 hex characters", key="audit.key_file")
    return bytes.fromhex(text.decode("ascii"))


def mac_of(key: bytes, previous: bytes, body: bytes) -> bytes:
    """The hex MAC of ``body`` after ``previous`` (hex): HMAC-SHA256 in one call (OpenSSL's one-shot)."""
    return hmac.digest(key, b"%b\n%b" % (previous, body), "sha256").hex().encode("ascii")


def parse_sealed(line: bytes) -> tuple[bytes, int, bytes] | None:
    """``(body, seq, mac)`` of a sealed line (without its newline), or None when it is not one."""
    if len(line) <= _SUFFIX_LEN or not line.endswith(b'"}'):
        return None
    cut = len(line) - _SUFFIX_LEN
    if line[cut : cut + len(_MAC_OPEN)] != _MAC_OPEN:
        return None
    mac = line[cut + len(_MAC_OPEN) : -2]
    body = line[:cut]
    at = body.rfind(_SEQ_OPEN)
    if at < 0:
        return None
    try:
        seq = int(body[at + len(_SEQ_OPEN) :])
    except ValueError:
        return None
    return body, seq, mac


@dataclass(frozen=True)
class Head:
    seq: int
    mac: str


class HeadFile:
    """``<seq> <mac> <tag>``: the last sealed record, tagged with the key (a forged head is refused)."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self._key = key

    def _tag(self, seq: int, mac: str) -> str:
        return hmac.new(self._key, f"audit-head\n{seq}\n{mac}".encode("ascii"), hashlib.sha256).hexdigest()

    def read(self) -> Head | None:
        """The head, or None when there is none; a ValueError when it is there but not genuine."""
        try:
            text = self.path.read_text(encoding="ascii").split()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"unreadable head file: {exc}") from None
        if len(text) != 3 or not text[0].isdigit():
            raise ValueError("malformed head file")
        seq, mac, tag = int(text[0]), text[1], text[2]
        if not hmac.compare_digest(tag, self._tag(seq, mac)):
            raise ValueError("head file tag does not verify (edited, or another key)")
        return Head(seq, mac)

    def write(self, head: Head) -> None:
        """Overwrite the head in place: one small fixed-length write (the sequence number zero-padded),
        so it is never a mix of two heads; cheap enough for every batch (a rename was 200 µs)."""
        data = f"{head.seq:020d} {head.mac} {self._tag(head.seq, head.mac)}\n".encode("ascii")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, _MODE)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)


class Chain:
    """The writer's side: seals lines in order. Runs in the audit writer's worker thread only."""

    def __init__(self, key: bytes, head: HeadFile) -> None:
        self._key = key
        self.head_file = head
        self.next_seq = 0
        self.last_mac = GENESIS
        self._note: dict[str, Any] | None = None
        self._resumed = False
        self._dirty = False

    # ------------------------------------------------------------------------------------------ resume

    def resume(self, path: Path) -> None:
        """Continue the chain of ``path`` (or its ``.1`` when the live file is empty), once, before the
        first line is sealed; a start that cannot simply continue is noted in the first record."""
        if self._resumed:
            return
        self._resumed = True
        try:
            head = self.head_file.read()
        except ValueError as exc:
            head = None
            self._note = {"epoch": "new", "reason": "head_unverifiable", "detail": str(exc)}
        last, torn, unsealed = _last_sealed(path)
        if last is None and not torn and not unsealed:
            last, torn, unsealed = _last_sealed(path.with_name(f"{path.name}.1"))
        if last is not None:
            seq, mac = last
            self.next_seq, self.last_mac = seq + 1, mac.decode("ascii")
            note: dict[str, Any] = {}
            if torn:
                note["after_torn_line"] = True
            if head is not None and head.seq > seq:
                note.update(lost_from_seq=seq + 1, lost_to_seq=head.seq)
                self.next_seq = head.seq + 1
            self._note = note or self._note
            return
        self.last_mac = GENESIS
        if head is not None:
            self.next_seq = head.seq + 1
            self._note = {"epoch": "new", "reason": "previous_records_missing", "head_seq": head.seq}
        elif unsealed or torn:
            self._note = {"epoch": "new", "reason": "unsealed_records"}

    # ------------------------------------------------------------------------------------------ sealing

    def seal(self, line: str) -> str:
        """The sealed form of one rendered JSON object line (it ends with ``}``)."""
        note = ""
        if self._note:
            note = ', "chain": ' + json.dumps(self._note, sort_keys=True)
            self._note = None
        body = f'{line[:-1]}{note}, "seq": {self.next_seq}'
        mac = mac_of(self._key, self.last_mac.encode("ascii"), body.encode("utf-8", "backslashreplace"))
        self.last_mac = mac.decode("ascii")
        self.next_seq += 1
        self._dirty = True
        return f'{body}, "mac": "{self.last_mac}"}}'

    def seal_overhead(self) -> int:
        """At most how many bytes sealing adds to the next line (the note, the sequence number, the MAC)."""
        note = len(json.dumps(self._note, sort_keys=True)) + 12 if self._note else 0
        return note + len(_SEQ_OPEN) + 20 + _SUFFIX_LEN

    def rotation_header(self, previous_file: str, time: str) -> str:
        """The first line of a new file: links it to the last record of ``previous_file``."""
        line = json.dumps(
            {
                "event": "audit_chain",
                "kind": "rotation",
                "time": time,
                "previous_file": previous_file,
                "previous_last_seq": self.next_seq - 1,
                "previous_last_mac": self.last_mac,
            }
        )
        return self.seal(line)

    def save_head(self) -> None:
        """After a batch: the head names the last sealed record (best effort: a verifier reports a head
        that lags)."""
        if self._dirty:
            self._dirty = False
            with contextlib.suppress(OSError):
                self.head_file.write(Head(self.next_seq - 1, self.last_mac))


def _last_sealed(path: Path) -> tuple[tuple[int, bytes] | None, bool, bool]:
    """(seq and mac of the last sealed line, the last line is torn, there are unsealed lines) of a
    regular file; nothing for a missing file or a FIFO (never read from a pipe)."""
    try:
        with path.open("rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None, False, False
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL_READ))
            data = f.read()
    except OSError:
        return None, False, False
    if not data:
        return None, False, False
    torn = not data.endswith(b"\n")
    lines = data.split(b"\n")
    if torn:
        lines = lines[:-1]
    unsealed = False
    for line in reversed(lines):
        if not line:
            continue
        parsed = parse_sealed(line)
        if parsed is not None:
            return (parsed[1], parsed[2]), torn, unsealed
        unsealed = True
    return None, torn, unsealed
