"""The embedded SSH target, driven by the real OpenSSH client (``ssh``, ``scp``, ``rsync``) as children."""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import termios
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import asyncssh
import pytest
from anyio.abc import ByteStream, Process, SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from remoteops.embedded import EmbeddedTarget

pytestmark = pytest.mark.anyio

_TIMEOUT = 20.0
_MiB = 1024 * 1024


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short private directory under /tmp (ControlPath must stay under 108 bytes); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ro-emb-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def target(short_tmp: Path) -> AsyncIterator[EmbeddedTarget]:
    async with EmbeddedTarget(short_tmp / "w") as running:
        yield running


def _ssh_argv(target: EmbeddedTarget, *args: str) -> list[str]:
    return ["ssh", "-F", str(target.ssh_config_path), *args]


async def _run(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(_TIMEOUT):
        return await anyio.run_process(
            argv, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL, check=False
        )


async def _ssh(
    target: EmbeddedTarget, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return await _run(_ssh_argv(target, *args), stdin)


async def _stop(proc: Process) -> None:
    with anyio.CancelScope(shield=True):
        if proc.returncode is None:
            proc.terminate()
            with anyio.move_on_after(_TIMEOUT):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
        await proc.aclose()


async def _read_line(stream: BufferedByteReceiveStream) -> bytes:
    with anyio.fail_after(_TIMEOUT):
        return await stream.receive_until(b"\n", 4096)


@contextlib.asynccontextmanager
async def _master(target: EmbeddedTarget, control_path: Path) -> AsyncIterator[bytes]:
    """A foreground ControlMaster; yields the SSH_CONNECTION its session saw, once the mux socket is up."""
    proc = await anyio.open_process(
        _ssh_argv(
            target,
            "-M",
            "-o",
            f"ControlPath={control_path}",
            "-o",
            "ControlPersist=no",
            target.alias,
            'echo "$SSH_CONNECTION"; exec cat',
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        yield await _read_line(BufferedByteReceiveStream(proc.stdout))
    finally:
        await _stop(proc)


@contextlib.asynccontextmanager
async def _echo_server() -> AsyncIterator[int]:
    async def echo(stream: ByteStream) -> None:
        async with stream:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.EndOfStream):
                async for chunk in stream:
                    await stream.send(chunk)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, echo)
        yield listener.extra(SocketAttribute.local_port)  # noqa: S610 — anyio typed attributes, not Django
        tg.cancel_scope.cancel()


def _free_port() -> int:
    return _free_ports(1)[0]


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (their sockets are open together: the kernel cannot hand out
    one port twice, as two bind-and-close calls in a row may)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


async def _echo_round_trip(port: int, payload: bytes, socks_to: int | None = None) -> bytes:
    with anyio.fail_after(_TIMEOUT):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            buffered = BufferedByteReceiveStream(stream)
            if socks_to is not None:
                await stream.send(b"\x05\x01\x00")
                assert await buffered.receive_exactly(2) == b"\x05\x00"
                await stream.send(
                    b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", socks_to)
                )
                assert (await buffered.receive_exactly(10))[1] == 0
            await stream.send(payload)
            return await buffered.receive_exactly(len(payload))


# ------------------------------------------------------------------------------------------------ tests


async def test_files_are_private_and_config_pins_the_host(target: EmbeddedTarget) -> None:
    assert target.port > 0
    assert target.host == "127.0.0.1"
    assert target.alias == "demo"
    assert target.ssh_config_path.parent.stat().st_mode & 0o777 == 0o700
    assert target.client_key_path.stat().st_mode & 0o777 == 0o600
    assert target.sandbox.stat().st_mode & 0o777 == 0o700
    assert target.known_hosts_path.read_text().startswith(f"[127.0.0.1]:{target.port} ssh-ed25519 ")
    config = target.ssh_config_path.read_text()
    assert "StrictHostKeyChecking yes" in config
    assert f"Port {target.port}" in config


@pytest.mark.parametrize("status", [0, 3, 255])
async def test_exit_status_of_the_command_reaches_the_client(target: EmbeddedTarget, status: int) -> None:
    result = await _ssh(target, "demo", f"exit {status}")
    assert result.returncode == status


async def test_command_runs_in_the_sandbox_as_the_current_user(target: EmbeddedTarget) -> None:
    result = await _ssh(target, "demo", 'pwd; id -un; echo "$HOME"')
    assert result.returncode == 0
    lines = result.stdout.decode().splitlines()
    assert lines == [str(target.sandbox), target.user, str(target.sandbox)]


async def test_command_killed_by_a_signal_is_reported_as_a_signal(target: EmbeddedTarget) -> None:
    result = await _ssh(target, "demo", "kill -KILL $$")
    assert result.returncode == 255  # OpenSSH's ssh exits 255 when the remote side died of a signal


async def test_a_command_that_cannot_start_fails_with_127(target: EmbeddedTarget) -> None:
    target.sandbox.rmdir()
    try:
        result = await _ssh(target, "demo", "true")
    finally:
        target.sandbox.mkdir(mode=0o700)
    assert result.returncode == 127
    assert (await _ssh(target, "demo", "true")).returncode == 0


async def test_stdout_and_stderr_stay_separate(target: EmbeddedTarget) -> None:
    result = await _ssh(target, "demo", "echo to-out; echo to-err >&2; echo more-out")
    assert result.returncode == 0
    assert result.stdout == b"to-out\nmore-out\n"
    assert result.stderr == b"to-err\n"


async def test_binary_stdin_round_trips_byte_exact(target: EmbeddedTarget) -> None:
    payload = os.urandom(3 * _MiB + 17)
    result = await _ssh(target, "demo", "cat", stdin=payload)
    assert result.returncode == 0
    assert result.stdout == payload


async def test_large_output_arrives_complete(target: EmbeddedTarget) -> None:
    payload = os.urandom(8 * _MiB)
    (target.sandbox / "big.bin").write_bytes(payload)
    result = await _ssh(target, "demo", "cat big.bin; echo done >&2")
    assert result.returncode == 0
    assert result.stderr == b"done\n"
    assert len(result.stdout) == len(payload)
    assert result.stdout == payload


async def test_an_unknown_client_key_is_refused(target: EmbeddedTarget, short_tmp: Path) -> None:
    other_key = short_tmp / "other_key"
    other_key.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    other_key.chmod(0o600)
    config = target.ssh_config_path.read_text()
    other_config = short_tmp / "other_config"  # IdentityFile accumulates, so -o would only add a key
    other_config.write_text(config.replace(str(target.client_key_path), str(other_key)))
    assert other_config.read_text() != config
    refused = await _run(["ssh", "-F", str(other_config), "demo", "true"])
    assert refused.returncode == 255
    assert (await _ssh(target, "demo", "true")).returncode == 0


async def test_another_user_name_is_refused(target: EmbeddedTarget) -> None:
    other_user = "nobody" if target.user != "nobody" else "daemon"
    result = await _ssh(target, "-l", other_user, "demo", "true")
    assert result.returncode == 255


async def test_host_key_checking_is_enforced(target: EmbeddedTarget, short_tmp: Path) -> None:
    wrong_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    wrong_known_hosts = short_tmp / "wrong_known_hosts"
    wrong_known_hosts.write_text(f"[127.0.0.1]:{target.port} {wrong_key[0]} {wrong_key[1]}\n")
    result = await _ssh(target, "-o", f"UserKnownHostsFile={wrong_known_hosts}", "demo", "true")
    assert result.returncode == 255


async def test_many_commands_share_one_control_master(target: EmbeddedTarget, short_tmp: Path) -> None:
    control_path = short_tmp / "cm"
    async with _master(target, control_path) as master_connection:
        results: dict[int, subprocess.CompletedProcess[bytes]] = {}

        async def one(index: int) -> None:
            results[index] = await _ssh(
                target, "-o", f"ControlPath={control_path}", "-o", "ControlMaster=no", "demo",
                f'echo "$SSH_CONNECTION"; echo {index}; exit {index % 4}',
            )  # fmt: skip

        async with anyio.create_task_group() as tg:
            for index in range(20):
                tg.start_soon(one, index)
    for index, result in results.items():
        assert result.returncode == index % 4
        assert result.stdout == master_connection + f"\n{index}\n".encode()
    assert len(results) == 20


async def test_rsync_copies_a_tree_there_and_back(target: EmbeddedTarget, short_tmp: Path) -> None:
    source = short_tmp / "src"
    (source / "nested" / "deeper").mkdir(parents=True)
    (source / "a.bin").write_bytes(os.urandom(300_000))
    (source / "nested" / "b.txt").write_text("hello\n")
    (source / "nested" / "deeper" / "c.bin").write_bytes(os.urandom(70_000))
    shell = f"ssh -F {target.ssh_config_path}"
    there = await _run(["rsync", "-a", "-e", shell, f"{source}/", "demo:dest/"])
    assert there.returncode == 0, there.stderr
    back_dir = short_tmp / "back"
    back = await _run(["rsync", "-a", "-e", shell, "demo:dest/", f"{back_dir}/"])
    assert back.returncode == 0, back.stderr
    for copy in (target.sandbox / "dest", back_dir):
        comparison = filecmp.dircmp(source, copy)
        assert not comparison.left_only
        assert not comparison.right_only
        for name in ("a.bin", "nested/b.txt", "nested/deeper/c.bin"):
            assert (copy / name).read_bytes() == (source / name).read_bytes()


async def test_scp_legacy_protocol_copies_both_ways(target: EmbeddedTarget, short_tmp: Path) -> None:
    local = short_tmp / "up.bin"
    local.write_bytes(os.urandom(1 * _MiB + 5))
    scp = ["scp", "-O", "-q", "-F", str(target.ssh_config_path)]
    up = await _run([*scp, str(local), "demo:up.bin"])
    assert up.returncode == 0, up.stderr
    assert (target.sandbox / "up.bin").read_bytes() == local.read_bytes()
    down = await _run([*scp, "demo:up.bin", str(short_tmp / "down.bin")])
    assert down.returncode == 0, down.stderr
    assert (short_tmp / "down.bin").read_bytes() == local.read_bytes()


async def test_scp_in_sftp_mode_lands_in_the_sandbox(target: EmbeddedTarget, short_tmp: Path) -> None:
    local = short_tmp / "s.bin"
    local.write_bytes(os.urandom(200_000))
    result = await _run(["scp", "-q", "-F", str(target.ssh_config_path), str(local), "demo:/s.bin"])
    assert result.returncode == 0, result.stderr
    assert (target.sandbox / "s.bin").read_bytes() == local.read_bytes()


async def test_local_dynamic_and_remote_forwards_carry_bytes(target: EmbeddedTarget, short_tmp: Path) -> None:
    control_path = short_tmp / "cm"
    local_port, socks_port = _free_ports(2)
    async with _echo_server() as echo_port, _master(target, control_path):
        mux = ["-o", f"ControlPath={control_path}", "-O", "forward"]
        forward = await _ssh(
            target, *mux,
            "-L", f"127.0.0.1:{local_port}:127.0.0.1:{echo_port}",
            "-D", f"127.0.0.1:{socks_port}",
            "-R", f"127.0.0.1:0:127.0.0.1:{echo_port}",
            "demo",
        )  # fmt: skip
        assert forward.returncode == 0, forward.stderr
        remote_port = int(forward.stdout.split()[0])
        assert await _echo_round_trip(local_port, b"via -L") == b"via -L"
        assert await _echo_round_trip(socks_port, b"via -D", socks_to=echo_port) == b"via -D"
        assert await _echo_round_trip(remote_port, b"via -R") == b"via -R"


async def test_remote_forward_beyond_loopback_is_refused(target: EmbeddedTarget) -> None:
    # Not via a master: an OpenSSH 9.2 master that saw a refused `-O forward -R` sometimes ignores SIGTERM.
    result = await _ssh(
        target, "-o", "ExitOnForwardFailure=yes", "-R", f"0.0.0.0:0:127.0.0.1:{_free_port()}", "demo", "true"
    )
    assert result.returncode == 255
    allowed = await _ssh(
        target,
        "-o",
        "ExitOnForwardFailure=yes",
        "-R",
        f"127.0.0.1:0:127.0.0.1:{_free_port()}",
        "demo",
        "true",
    )
    assert allowed.returncode == 0


async def test_pty_is_allocated_with_the_requested_size(target: EmbeddedTarget) -> None:
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        with anyio.fail_after(_TIMEOUT):
            result = await anyio.run_process(
                _ssh_argv(target, "-tt", "demo", "tty; stty size; test -t 0 && echo stdin-is-tty"),
                stdin=slave,
                check=False,
            )
    finally:
        os.close(slave)
        os.close(master)
    assert result.returncode == 0
    lines = result.stdout.decode().split("\r\n")
    assert lines[0].startswith("/dev/pts/")
    assert lines[1] == "33 101"
    assert lines[2] == "stdin-is-tty"


async def test_interactive_shell_on_a_pty_reads_typed_commands(target: EmbeddedTarget) -> None:
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        os.write(master, b"echo typed-$((6 * 7)); exit 7\n")  # waits in the local pty until ssh reads it
        with anyio.fail_after(_TIMEOUT):
            result = await anyio.run_process(_ssh_argv(target, "-tt", "demo"), stdin=slave, check=False)
    finally:
        os.close(slave)
        os.close(master)
    assert result.returncode == 7
    assert b"typed-42\r\n" in result.stdout


async def test_closing_the_client_kills_the_remote_command(target: EmbeddedTarget) -> None:
    proc = await anyio.open_process(
        _ssh_argv(target, "demo", 'sleep 600 & echo "$$ $!" > pids; echo ready; wait'),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert await _read_line(BufferedByteReceiveStream(proc.stdout)) == b"ready"
        pids = [int(word) for word in (target.sandbox / "pids").read_text().split()]
        pidfds = [os.pidfd_open(pid) for pid in pids]
    finally:
        await _stop(proc)
    try:
        with anyio.fail_after(_TIMEOUT):
            for pidfd in pidfds:
                await anyio.wait_readable(pidfd)  # a pidfd turns readable when its process has exited
    finally:
        for pidfd in pidfds:
            os.close(pidfd)


async def test_leaving_the_context_ends_running_commands(short_tmp: Path) -> None:
    async with EmbeddedTarget(short_tmp / "w2", alias="other") as target:
        proc = await anyio.open_process(
            _ssh_argv(target, "other", "echo $$ > pid; echo ready; exec sleep 600"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert proc.stdout is not None
            assert await _read_line(BufferedByteReceiveStream(proc.stdout)) == b"ready"
            pidfd = os.pidfd_open(int((target.sandbox / "pid").read_text()))
        except BaseException:
            await _stop(proc)
            raise
    try:
        with anyio.fail_after(_TIMEOUT):
            await anyio.wait_readable(pidfd)
            assert await proc.wait() == 255
    finally:
        os.close(pidfd)
        await _stop(proc)
