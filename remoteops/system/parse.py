"""Each system program's output (``sh/*.sh``) to its records. Pure functions; a malformed line is left out
(a process that vanished mid-read), never guessed at."""

from __future__ import annotations

import base64
import binascii
import csv
import ipaddress
import shlex

from remoteops.system.models import (
    DirectoryEntry,
    Filesystem,
    GpuDevice,
    ListeningSocket,
    OsRelease,
    ProcessRecord,
)

__all__ = [
    "parse_df",
    "parse_du",
    "parse_gpus",
    "parse_os_release",
    "parse_proc_sockets",
    "parse_processes",
    "parse_sections",
    "parse_ss",
    "start_epoch",
]


def parse_sections(text: str) -> dict[str, list[str]]:
    """``== NAME`` headed sections (``info.sh``) to their lines."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return sections


def parse_os_release(lines: list[str]) -> OsRelease:
    """os-release(5): ``KEY=value`` lines, values in shell quoting."""
    fields: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key.isidentifier():
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        fields[key] = " ".join(words)
    return OsRelease(
        id=fields.get("ID"),
        name=fields.get("NAME"),
        version_id=fields.get("VERSION_ID"),
        pretty_name=fields.get("PRETTY_NAME"),
        fields=fields,
    )


def start_epoch(btime: int, starttime: int, hz: int) -> float:
    """A process's start in epoch seconds, to the clock tick (as ``signal.sh`` reads it): rounded to as
    many decimals as ``hz`` has digits (3 at the usual 100: the hundredth, exactly), so that ``signal.sh``
    gets the exact tick back (``(epoch - btime) * hz`` rounded) at any ``CLK_TCK`` (250, 1000, 1024 ...)."""
    return round(btime + starttime / hz, max(2, len(str(max(hz, 1)))))


def _argv(encoded: str, cap: int) -> tuple[list[str], bool]:
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return [], False
    truncated = len(raw) > cap
    raw = raw[:cap]
    words = raw.split(b"\0")
    if words and words[-1] == b"":
        words.pop()
    return [w.decode("utf-8", errors="replace") for w in words], truncated


def parse_processes(text: str, argv_cap: int) -> tuple[list[ProcessRecord], int]:
    """``procs.sh``'s output: the listed records (in its order) and how many processes matched."""
    hz, page, btime, uptime = 100, 4096, 0, 0.0
    users: dict[int, str] = {}
    rows: list[tuple[list[str], str]] = []
    matched = 0
    lines = text.splitlines()
    for index, line in enumerate(lines):
        kind, _, rest = line.partition(" ")
        if kind == "H":
            h = rest.split()
            hz, page, btime, uptime = int(h[0]), int(h[1]), int(h[2]), float(h[3])
        elif kind == "P":
            fields = rest.split(" ", 7)
            argv_line = lines[index + 1] if index + 1 < len(lines) else ""
            if len(fields) == 8 and all(f.lstrip("-").isdigit() for f in fields[:3] + fields[4:7]):
                rows.append((fields, argv_line[2:] if argv_line.startswith("A ") else ""))
        elif kind == "U":
            uid, _, name = rest.partition(" ")
            if uid.isdigit() and name:
                users[int(uid)] = name
        elif kind == "T" and rest.strip().isdigit():
            matched = int(rest)
    records = []
    for fields, encoded in rows:
        pid, ppid, uid, state, ticks, start, rss = fields[:7]
        age = max(uptime - int(start) / hz, 0.01)
        argv, truncated = _argv(encoded, argv_cap)
        records.append(
            ProcessRecord(
                pid=int(pid),
                ppid=int(ppid),
                uid=int(uid),
                user=users.get(int(uid)),
                state=state,
                name=fields[7],
                cpu_percent=round(min(int(ticks) / hz / age * 100, 100.0 * 4096), 1),
                rss_bytes=int(rss) * page,
                start_time=start_epoch(btime, int(start), hz),
                argv=argv,
                argv_truncated=truncated,
            )
        )
    return records, matched


def _split_host_port(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    if host.startswith("[") and "]" in host:  # [::1] or [::1]%lo
        inside, _, scope = host[1:].partition("]")
        host = inside + scope
    return ("0.0.0.0" if host == "*" else host), int(port)  # noqa: S104  # ss's "*" is every address


def _ss_users(column: str) -> list[tuple[str, int]]:
    """``users:(("name",pid=1,fd=3),("other",pid=2,fd=4))``: (name, pid) of each owner."""
    out: list[tuple[str, int]] = []
    rest = column.partition("users:(")[2]
    while rest.startswith('("'):
        end = rest.find('",', 2)
        if end < 0:
            break
        name = rest[2:end]
        attrs, _, rest = rest[end + 2 :].partition(")")
        rest = rest.lstrip(",")
        for attr in attrs.split(","):
            key, _, value = attr.partition("=")
            if key == "pid" and value.isdigit():
                out.append((name, int(value)))
    return out


def parse_ss(text: str) -> list[ListeningSocket]:
    """``ss -H -O -tulpn`` records: Netid State Recv-Q Send-Q Local Peer [Process]."""
    sockets: list[ListeningSocket] = []
    for line in text.splitlines():
        parts = line.split(None, 6)
        if len(parts) < 6 or parts[0] not in ("tcp", "udp"):
            continue
        local = _split_host_port(parts[4])
        if local is None:
            continue
        address, port = local
        family = "ipv6" if ":" in address.partition("%")[0] else "ipv4"
        owners = _ss_users(parts[6]) if len(parts) == 7 else []
        name, pid = owners[0] if owners else (None, None)
        sockets.append(
            ListeningSocket(
                protocol="tcp" if parts[0] == "tcp" else "udp",
                family=family,
                address=address,
                port=port,
                pid=pid,
                process=name,
            )
        )
    return sockets


def _proc_address(hex_addr: str, ipv6: bool) -> tuple[str, int] | None:
    """``0100007F:1F90`` (the address as the kernel's 32-bit words in host order, little-endian here)."""
    addr, _, port = hex_addr.partition(":")
    try:
        raw = bytes.fromhex(addr)
        number = int(port, 16)
    except ValueError:
        return None
    if len(raw) != (16 if ipv6 else 4):
        return None
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.IPv6Address(swapped) if ipv6 else ipaddress.IPv4Address(swapped)
    return str(ip), number


def parse_proc_sockets(text: str) -> list[ListeningSocket]:
    """``ports.sh``'s /proc fallback: ``L proto address inode`` and ``O pid inode comm`` lines."""
    owners: dict[str, tuple[int, str]] = {}
    listening: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if parts[0] == "L" and len(parts) == 4:
            listening.append((parts[1], parts[2], parts[3]))
        elif parts[0] == "O" and len(parts) == 4 and parts[1].isdigit():
            owners.setdefault(parts[2], (int(parts[1]), parts[3]))
    sockets = []
    for proto, hex_addr, inode in listening:
        ipv6 = proto.endswith("6")
        local = _proc_address(hex_addr, ipv6)
        if local is None:
            continue
        pid, name = owners.get(inode, (None, None))
        sockets.append(
            ListeningSocket(
                protocol="tcp" if proto.startswith("tcp") else "udp",
                family="ipv6" if ipv6 else "ipv4",
                address=local[0],
                port=local[1],
                pid=pid,
                process=name,
            )
        )
    return sockets


def parse_df(lines: list[str]) -> list[Filesystem]:
    """``df -P -B1 -T``: Filesystem Type 1-blocks Used Available Capacity Mounted-on (header first)."""
    out = []
    for line in lines[1:]:
        parts = line.split(None, 6)
        if len(parts) < 7 or not all(p.isdigit() for p in parts[2:5]):
            continue
        percent = parts[5].rstrip("%")
        out.append(
            Filesystem(
                filesystem=parts[0],
                type=parts[1],
                size_bytes=int(parts[2]),
                used_bytes=int(parts[3]),
                available_bytes=int(parts[4]),
                use_percent=int(percent) if percent.isdigit() else None,
                mount=parts[6],
            )
        )
    return out


def parse_du(encoded: str, path: str) -> tuple[int | None, list[DirectoryEntry]]:
    """``disk.sh``'s records (``SIZE<tab>NAME\\0``, largest first): the path's total and its children."""
    raw = base64.b64decode(encoded or b"")
    total: int | None = None
    children = []
    wanted = path.rstrip("/") or "/"
    for record in raw.split(b"\0"):
        size, sep, name = record.partition(b"\t")
        if not sep or not size.isdigit():
            continue
        text = name.decode("utf-8", errors="replace")
        if text.rstrip("/") == wanted.rstrip("/") or text == wanted:
            total = int(size)
        else:
            children.append(DirectoryEntry(path=text, bytes=int(size)))
    return total, children


def _number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # [N/A], [Not Supported]


def parse_gpus(lines: list[str]) -> list[GpuDevice]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,temperature.gpu,
    driver_version --format=csv,noheader,nounits`` (memory in MiB)."""
    gpus = []
    for row in csv.reader(lines, skipinitialspace=True):
        if len(row) != 8 or not row[0].strip().isdigit():
            continue
        total, used = _number(row[3]), _number(row[4])
        uuid, driver = row[2].strip(), row[7].strip()
        gpus.append(
            GpuDevice(
                index=int(row[0]),
                name=row[1].strip(),
                uuid=uuid if uuid and not uuid.startswith("[") else None,
                memory_total_bytes=None if total is None else int(total * 1024 * 1024),
                memory_used_bytes=None if used is None else int(used * 1024 * 1024),
                utilization_percent=_number(row[5]),
                temperature_c=_number(row[6]),
                driver_version=driver if driver and not driver.startswith("[") else None,
            )
        )
    return gpus
