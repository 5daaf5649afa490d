"""``docker_host_root`` for real: a privileged container sharing the host's PID namespace and root filesystem
(``chroot /host``), started by the target's container engine (Debian's ``podman``; ``podman-docker`` gives it
the ``docker`` name). The image is built offline from the host's own ``chroot`` binary (``podman import``):
no registry is contacted. The engine's options are found the way an operator finds them for ``root.
docker_run_args``: its defaults first; where this machine refuses them (a sandboxed VM without
``CAP_SYS_RESOURCE`` rejects the runtime's default rlimits; crun refuses hybrid cgroups), ``runc`` with
rlimits the machine allows. Where none of these runs a container, the test is skipped with every attempt's
own error as the reason -- it never passes without a container having run.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from remoteops import PrivilegeSettings, RemoteOps, TargetSpec, TransportSettings
from tests.fixtures.sshd import SshdInstance

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

IMAGE = "localhost/rog-test-chroot:1"
_FILES = ("usr/sbin/chroot", "lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2")


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


# The engine's run options tried in order: its defaults, then runc (hybrid cgroups), then runc with rlimits
# below this machine's (an engine's defaults raise them, which needs CAP_SYS_RESOURCE).
_OPTION_SETS: tuple[tuple[str, ...], ...] = (
    (),
    ("--runtime=runc",),
    ("--runtime=runc", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024"),
)


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, tuple[str, ...]]]:
    """The container engine's command and the run options with which a privileged host-PID container
    really ran; else skip."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("no container engine can run here: podman is not installed (apt-get install podman)")
    work = Path(tempfile.mkdtemp(prefix="rogd-"))
    try:
        # dereference: Debian's /lib64/ld-linux-x86-64.so.2 is a symlink into /lib
        with tarfile.open(work / "rootfs.tar", "w", dereference=True) as tar:
            for name in _FILES:
                tar.add(f"/{name}", arcname=name)
        imported = _run([podman, "import", str(work / "rootfs.tar"), IMAGE])
        if imported.returncode != 0:
            pytest.skip(f"no container engine can run here: podman import failed: {imported.stderr.strip()}")
        failures: list[str] = []
        for options in _OPTION_SETS:
            if "--runtime=runc" in options and shutil.which("runc") is None:
                failures.append(f"{' '.join(options)}: runc is not installed")
                continue
            probe = _run(
                [
                    podman,
                    "run",
                    "--rm",
                    "--privileged",
                    "--pid=host",
                    *options,
                    IMAGE,
                    "/usr/sbin/chroot",
                    "--version",
                ]
            )
            if probe.returncode == 0:
                break
            failures.append(f"{' '.join(options) or 'defaults'}: {probe.stderr.strip()[-200:]}")
        else:
            pytest.skip(f"no container engine can run here: podman run failed: {'; '.join(failures)}")
        yield podman, options
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _run([podman or "podman", "rmi", "-f", IMAGE])


async def test_docker_host_root_runs_the_command_as_uid_0_in_the_hosts_pid_namespace(
    sshd: SshdInstance, engine: tuple[str, tuple[str, ...]]
) -> None:
    binary, options = engine
    transport = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    privilege = PrivilegeSettings(
        providers=("docker_host_root",), docker_image=IMAGE, docker_binary=binary, docker_run_args=options
    )
    async with RemoteOps(
        transport, [TargetSpec(name="root", host=sshd.alias("root"))], privilege=privilege
    ) as ops:
        with anyio.fail_after(120):
            result = await ops.run("root", ["sh", "-c", "id -u; cat /proc/1/comm"], privilege="root")
    assert result.exit_code == 0, result.stderr
    uid, init = result.stdout.split()
    assert uid == "0"
    host_init = (await anyio.Path("/proc/1/comm").read_text()).strip()
    assert init == host_init  # the host's PID 1, not the container's
    assert result.privilege is not None
    assert result.privilege.provider == "docker_host_root"
