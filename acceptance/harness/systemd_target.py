"""A real systemd (252, as PID 1 of its own namespaces) booted from the host's own root through a RAM overlay.

Method (``/work/shared/notes/systemd-target.md``): a dedicated cgroup v2 directory for the launcher; ``unshare
--pid --fork --mount --uts --ipc --cgroup --net --propagation private``; inside, a tmpfs holding an overlay
over ``/`` (RAM upper: every boot is pristine, nothing on the host changes), the caller's files copied in,
``/proc`` with **``/proc/sys`` read-only** (a writable one lets systemd-sysctl change the *host's* sysctls),
read-only ``/sys``, a private cgroup2, a tmpfs ``/dev`` with a new devpts, tmpfs ``/run`` and ``/tmp``;
``pivot_root``; ``exec /lib/systemd/systemd``. With ``--net`` the target has its own loopback, so nothing in
it can bind a host port; :meth:`SystemdTarget.net_run` runs a host program inside that network namespace.

Stop: ``SIGRTMIN+4`` (container poweroff) → bounded wait → SIGKILL of the target's PID 1 (tears down the whole
PID namespace and every mount) → the cgroup tree removed. ``systemd_target()`` then verifies that the cgroup
directory is gone, no host mount of its own is left and the host's ``fs.protected_*`` sysctls are unchanged,
and raises :class:`SystemdTargetLeak` otherwise.

Usable by any test that needs a real systemd (``systemctl``, ``journalctl``, transient units): pass ``files``
(path inside the target → text), ``symlinks``, extra units to ``mask`` and shell ``setup`` lines run chrooted
in the target before boot (e.g. ``useradd``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from acceptance.harness import starts

__all__ = [
    "DEFAULT_MASK",
    "SystemdTarget",
    "SystemdTargetLeak",
    "SystemdTargetUnavailable",
    "host_sysctls",
    "systemd_target",
    "systemd_target_unavailable_reason",
]

SYSTEMD = Path("/lib/systemd/systemd")
CGROUP_V2 = Path("/sys/fs/cgroup/unified")
SYSCTLS = ("fs.protected_fifos", "fs.protected_hardlinks", "fs.protected_regular", "fs.protected_symlinks")
DEFAULT_MASK = (
    # host-image units that fail, wait for hardware, or would run real work in a container of this host
    "getty@tty1.service",
    "console-getty.service",
    "systemd-timesyncd.service",
    "systemd-pstore.service",
    "postgresql.service",
    "ssh.service",
    "ssh.socket",
    "e2scrub_reap.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "man-db.timer",
)

_INNER = r"""#!/bin/sh
# PID 1 of the new namespaces until it execs systemd. $1: the host work directory (staging, setup script).
set -eu
W="$1"
mount --make-rprivate /
mkdir -p "$W/t"
mount -t tmpfs -o mode=0755,size=2g tmpfs "$W/t"
mkdir "$W/t/upper" "$W/t/work" "$W/t/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$W/t/upper,workdir=$W/t/work" "$W/t/root"
R="$W/t/root"
cp -a "$W/stage/." "$R/"
mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"
mount -o remount,bind,ro "$R/proc/sys"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=0755,nosuid tmpfs "$R/dev"
mknod -m 666 "$R/dev/null" c 1 3
mknod -m 666 "$R/dev/zero" c 1 5
mknod -m 666 "$R/dev/full" c 1 7
mknod -m 666 "$R/dev/random" c 1 8
mknod -m 666 "$R/dev/urandom" c 1 9
mknod -m 666 "$R/dev/tty" c 5 0
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/tmp"
chroot "$R" /bin/sh -eu < "$W/setup.sh"
cd "$R"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot
export container=unshare
exec /lib/systemd/systemd --system --unit=multi-user.target
"""


class SystemdTargetUnavailable(RuntimeError):
    """This machine cannot boot the target (the message says why)."""


class SystemdTargetLeak(RuntimeError):
    """The target left something behind on the host (cgroup, mount, a changed sysctl)."""


def systemd_target_unavailable_reason() -> str | None:
    """Why a systemd target cannot be booted here, or None when it can."""
    if os.geteuid() != 0:
        return "booting a systemd target needs root (mount and namespace rights)"
    missing = [
        tool for tool in ("unshare", "nsenter", "pivot_root", "chroot", "mount") if shutil.which(tool) is None
    ]
    if missing:
        return f"util-linux tools missing: {', '.join(missing)}"
    if not SYSTEMD.exists():
        return f"{SYSTEMD} is not installed"
    if not (CGROUP_V2 / "cgroup.procs").exists() or not os.access(CGROUP_V2, os.W_OK):
        return f"no writable cgroup v2 hierarchy at {CGROUP_V2}"
    return None


def host_sysctls() -> dict[str, str]:
    """The host sysctls a target with a writable /proc/sys would change."""
    return {name: Path("/proc/sys", *name.split(".")).read_text().strip() for name in SYSCTLS}


def _mount_table() -> list[str]:
    return sorted(Path("/proc/self/mounts").read_text().splitlines())


@starts("systemd")
@dataclass
class SystemdTarget:
    pid: int
    """The target's PID 1 (systemd) as the host sees it."""
    cgroup: Path
    workdir: Path
    log_path: Path
    boot_s: float = 0.0

    @property
    def root(self) -> Path:
        """The target's root directory, readable from the host."""
        return Path(f"/proc/{self.pid}/root")

    def run(
        self, *argv: str, timeout_s: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a program inside the target (all its namespaces, its root)."""
        done = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)} exited {done.returncode}: {done.stdout}{done.stderr}")
        return done

    def net_run(
        self, argv: list[str], *, timeout_s: float = 60.0, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a *host* program inside the target's network namespace only (host files, target loopback)."""
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-n", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
        )

    def systemctl(
        self, *args: str, timeout_s: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args, timeout_s=timeout_s, check=check)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.run("journalctl", "--no-pager", "-o", "short-monotonic", "-u", unit, check=False).stdout

    def is_running(self) -> bool:
        return (
            self.run("systemctl", "is-system-running", check=False, timeout_s=60).stdout.strip() == "running"
        )


def _stage(stage: Path, files: Mapping[str, str], symlinks: Mapping[str, str], mask: Iterable[str]) -> None:
    for path, text in files.items():
        dest = stage / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
        dest.chmod(0o644)
    links = {**{f"/etc/systemd/system/{unit}": "/dev/null" for unit in mask}, **symlinks}
    for path, target in links.items():
        dest = stage / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(target)


def _child_of(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _remove_cgroup(cgroup: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while cgroup.exists():
        for path in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            cgroup.rmdir()
        if cgroup.exists():
            if time.monotonic() > deadline:
                raise SystemdTargetLeak(
                    f"cgroup {cgroup} could not be removed: {(cgroup / 'cgroup.procs').read_text()}"
                )
            time.sleep(0.05)  # processes of the torn-down namespace are still exiting (bounded)


@starts("systemd")
@contextlib.contextmanager
def systemd_target(
    *,
    files: Mapping[str, str] | None = None,
    symlinks: Mapping[str, str] | None = None,
    mask: Iterable[str] = DEFAULT_MASK,
    setup: Iterable[str] = (),
    boot_timeout_s: float = 180.0,  # boots in ~1 s here: a ceiling for a loaded machine
    stop_timeout_s: float = 20.0,
) -> Iterator[SystemdTarget]:
    """Boot a systemd target; yield it once ``is-system-running`` says ``running``; stop it and verify."""
    reason = systemd_target_unavailable_reason()
    if reason is not None:
        raise SystemdTargetUnavailable(reason)
    sysctls_before = host_sysctls()
    mounts_before = _mount_table()
    work = Path(tempfile.mkdtemp(prefix="rogsd-", dir="/tmp"))
    cgroup = CGROUP_V2 / f"rogsd-{uuid.uuid4().hex[:10]}"
    proc: subprocess.Popen[bytes] | None = None
    target: SystemdTarget | None = None
    try:
        _stage(work / "stage", files or {}, symlinks or {}, mask)
        (work / "setup.sh").write_text("\n".join([*setup, ""]), encoding="utf-8")
        inner = work / "inner.sh"
        inner.write_text(_INNER, encoding="utf-8")
        cgroup.mkdir()
        log_path = work / "target.log"
        launcher = (
            'echo $$ > "$1/cgroup.procs" && exec unshare --pid --fork --mount --uts --ipc --cgroup --net '
            '--propagation private /bin/sh "$2" "$3"'
        )
        started = time.monotonic()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", launcher, "sh", str(cgroup), str(inner), str(work)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = started + boot_timeout_s
        while True:
            if proc.poll() is not None:
                raise SystemdTargetUnavailable(
                    f"the target exited {proc.returncode}: {log_path.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"systemd did not start in {boot_timeout_s}s: {log_path.read_text()[-3000:]}"
                )
            pid = _child_of(proc.pid)
            if pid is not None and _comm(pid) == "systemd":
                break
            time.sleep(0.02)  # polling another process's exec (bounded by the deadline)
        target = SystemdTarget(pid=pid, cgroup=cgroup, workdir=work, log_path=log_path)
        while not (target.root / "run/systemd/private").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"systemd's private bus never appeared: {log_path.read_text()[-3000:]}")
            time.sleep(0.02)  # systemd is setting itself up (bounded by the deadline)
        state = target.run(
            "systemctl",
            "is-system-running",
            "--wait",
            timeout_s=max(1.0, deadline - time.monotonic()),
            check=False,
        )
        if state.stdout.strip() != "running":
            failed = target.systemctl("list-units", "--failed", "--plain", "--no-legend", check=False)
            raise RuntimeError(
                f"target booted {state.stdout.strip()!r} ({state.stderr.strip()}); failed units: "
                f"{failed.stdout}{failed.stderr}; log: {log_path.read_text()[-2000:]}"
            )
        target.boot_s = round(time.monotonic() - started, 3)
        yield target
    finally:
        if proc is not None:
            if target is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target.pid, signal.SIGRTMIN + 4)
            if not _wait(proc, stop_timeout_s if target is not None else 0.1):
                child = _child_of(proc.pid)
                with contextlib.suppress(ProcessLookupError, TypeError):
                    os.kill(child, signal.SIGKILL)  # type: ignore[arg-type]
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        leaks: list[str] = []
        try:
            if cgroup.exists():
                _remove_cgroup(cgroup)
        except SystemdTargetLeak as exc:
            leaks.append(str(exc))
        shutil.rmtree(work, ignore_errors=True)
        # Other processes on the machine may mount meanwhile (ip netns, other tests): only ours count.
        added = set(_mount_table()) - set(mounts_before)
        new_mounts = [m for m in added if str(work) in m or cgroup.name in m]
        if new_mounts:
            leaks.append(f"host mounts left: {sorted(new_mounts)}")
        if host_sysctls() != sysctls_before:
            leaks.append(f"host sysctls changed: {sysctls_before} -> {host_sysctls()}")
        if leaks:
            raise SystemdTargetLeak("; ".join(leaks))
