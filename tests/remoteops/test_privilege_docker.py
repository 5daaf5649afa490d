"""``docker_host_root`` for real: a privileged container sharing the host's PID namespace and root filesystem
(``chroot /host``), started by the target's container engine (Debian's ``podman``; ``podman-docker`` gives it
the ``docker`` name). The image is built offline from the host's own ``chroot`` binary (``podman import``):
no registry is contacted. Where no container engine can run a container on this machine (an unprivileged
outer container refuses ``setrlimit`` to the OCI runtime, no engine installed, ...), the test is skipped with
the engine's own error as the reason -- it never passes without a container having run.
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


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    """The container engine's command, once a privileged host-PID container really ran; else skip."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("no container engine can run here: podman is not installed (apt-get install podman)")
    work = Path(tempfile.mkdtemp(prefix="rogd-"))
    try:
        with tarfile.open(work / "rootfs.tar", "w") as tar:
            for name in _FILES:
                tar.add(f"/{name}", arcname=name)
        imported = _run([podman, "import", str(work / "rootfs.tar"), IMAGE])
        if imported.returncode != 0:
            pytest.skip(f"no container engine can run here: podman import failed: {imported.stderr.strip()}")
        probe = _run(
            [podman, "run", "--rm", "--privileged", "--pid=host", IMAGE, "/usr/sbin/chroot", "--version"]
        )
        if probe.returncode != 0:
            pytest.skip(f"no container engine can run here: podman run failed: {probe.stderr.strip()[-300:]}")
        yield podman
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _run([podman or "podman", "rmi", "-f", IMAGE])


async def test_docker_host_root_runs_the_command_as_uid_0_in_the_hosts_pid_namespace(
    sshd: SshdInstance, engine: str
) -> None:
    transport = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    privilege = PrivilegeSettings(providers=("docker_host_root",), docker_image=IMAGE, docker_binary=engine)
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
