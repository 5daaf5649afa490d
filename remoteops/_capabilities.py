"""Capability probing (one round trip) with a per-target cache, plus the diagnose sections."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable

from remoteops._errors import ProbeError
from remoteops._models import Capabilities, DiskUsage, ExecResult, TargetIdentity

__all__ = ["PROBE_ARGV", "TOOLS", "CapabilityCache", "parse_df", "parse_probe", "rsync_version"]

TOOLS = (
    "python3", "rsync", "tmux", "sudo", "su", "docker", "systemctl", "journalctl", "ss", "sha256sum",
    "timeout", "nvidia-smi",
)  # fmt: skip

_PROBE = r"""echo '@@os'; cat /etc/os-release 2>/dev/null
echo '@@kernel'; uname -r 2>/dev/null
echo '@@arch'; uname -m 2>/dev/null
echo '@@user'; id -un 2>/dev/null
echo '@@uid'; id -u 2>/dev/null
echo '@@tools'
for t in "$@"; do if command -v "$t" >/dev/null 2>&1; then echo "$t 1"; else echo "$t 0"; fi; done
echo '@@rsync'
if command -v rsync >/dev/null 2>&1; then rsync --version 2>/dev/null | head -n 1; fi
echo '@@sudo'
if command -v sudo >/dev/null 2>&1; then
  if e=$(sudo -n true 2>&1 </dev/null >/dev/null); then echo 1
  else echo 0; printf '%s\n' "$e" | tail -n 3; fi
else echo 0; fi
"""
PROBE_ARGV = ("sh", "-c", _PROBE, "rog-probe", *TOOLS)
_RSYNC_VERSION = re.compile(r"^rsync\s+version\s+v?(\d+(?:\.\d+)*)")


def rsync_version(line: str | None) -> str | None:
    """``3.2.7`` from the first line of ``rsync --version`` (``rsync  version 3.2.7  protocol …``)."""
    found = _RSYNC_VERSION.match(line.strip()) if line else None
    return found.group(1) if found else None


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_probe(target: str, identity: TargetIdentity, stdout: str) -> Capabilities:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None:
            current.append(line)
    if "tools" not in sections or "sudo" not in sections:
        raise ValueError("capability probe output is incomplete")
    os_release: dict[str, str] = {}
    for line in sections.get("os", []):
        key, sep, value = line.partition("=")
        if sep:
            os_release[key.strip()] = _unquote(value)
    tools = {}
    for line in sections["tools"]:
        name, _, flag = line.rpartition(" ")
        if name in TOOLS:
            tools[name] = flag == "1"

    def first(name: str) -> str | None:
        lines = [x for x in sections.get(name, []) if x.strip()]
        return lines[0].strip() if lines else None

    uid_text = first("uid")
    return Capabilities(
        target=target,
        identity_hash=identity.identity_hash,
        os_id=os_release.get("ID"),
        os_version=os_release.get("VERSION_ID"),
        os_pretty=os_release.get("PRETTY_NAME"),
        kernel=first("kernel"),
        arch=first("arch"),
        user=first("user"),
        uid=int(uid_text) if uid_text and uid_text.isdigit() else None,
        tools=tools,
        sudo_nopasswd=first("sudo") == "1",
        sudo_said=" ".join(x.strip() for x in sections.get("sudo", [])[1:] if x.strip())[:300] or None,
        rsync_version=rsync_version(first("rsync")),
        probed_at=time.time(),
    )


def parse_df(stdout: str) -> list[DiskUsage]:
    disks: list[DiskUsage] = []
    for line in stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 6 or not parts[1].isdigit():
            continue
        disks.append(
            DiskUsage(
                filesystem=parts[0],
                size_kb=int(parts[1]),
                used_kb=int(parts[2]),
                avail_kb=int(parts[3]),
                use_percent=int(parts[4].rstrip("%") or 0) if parts[4].rstrip("%").isdigit() else 0,
                mount=" ".join(parts[5:]),
            )
        )
    return disks


class CapabilityCache:
    """Per-target cache; an entry is valid for ``ttl_s`` and only for the identity it was probed under.
    Failed probes are never cached."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Capabilities]] = {}
        self.probes = 0
        self.hits = 0

    async def get(
        self,
        target: str,
        identity: TargetIdentity,
        run_probe: Callable[[], Awaitable[ExecResult]],
        *,
        refresh: bool = False,
    ) -> Capabilities:
        entry = self._entries.get(target)
        now = time.monotonic()
        if (
            not refresh
            and entry is not None
            and entry[1].identity_hash == identity.identity_hash
            and now - entry[0] < self._ttl_s
        ):
            self.hits += 1
            return entry[1]
        self._entries.pop(target, None)
        self.probes += 1
        result = await run_probe()
        if result.exit_code != 0:
            raise ProbeError(
                f"probe exited {result.exit_code}: {result.stderr.strip()[-300:]}", target=target
            )
        try:
            caps = parse_probe(target, identity, result.stdout)
        except ValueError as exc:
            raise ProbeError(str(exc), target=target) from exc
        self._entries[target] = (now, caps)
        return caps
