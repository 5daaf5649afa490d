"""Login-shell output does not keep the agent off a target: the loader writes a start marker made of a fresh
nonce right before the agent starts, and the channel drops everything on stdout before it (banners, rc-file
output, ``~/.ssh/rc`` text); stderr noise is not taken for a failure. Against the real sshd's banner users
(tests/fixtures/sshd.py: bash ``~/.bashrc``, dash ``~/.ssh/rc`` sourcing ``~/.profile``, zsh ``~/.zshenv``,
each printing on stdout and stderr), and the loader and the marker scanner alone."""

from __future__ import annotations

import hashlib
import subprocess

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoteops import RemoteOps, TargetSpec, TransportSettings
from remoteops._process import supervised_child
from remoteops.agent import program as proto
from remoteops.agent.boot import AgentBoot, StartScanner, boot_command, current_build, new_boot
from tests.fixtures.profiles import examples
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.test_agent_protocol import Agent, _hello

pytestmark = pytest.mark.anyio

BANNER_ROLES = ("bashrc", "dash", "zsh")


def _ops(sshd: SshdInstance, role: str, **overrides: object) -> RemoteOps:
    settings_ = TransportSettings.model_validate(
        {"ssh_config_file": sshd.ssh_config, "control_dir": sshd.control_dir, **overrides}
    )
    return RemoteOps(settings_, [TargetSpec(name=role, host=sshd.alias(role))])


@pytest.mark.parametrize("role", BANNER_ROLES)
async def test_a_login_shell_that_prints_banners_on_stdout_and_stderr_still_gets_the_agent(
    sshd: SshdInstance, role: str
) -> None:
    if role not in sshd.aliases:
        pytest.skip(f"no {role} on this machine (ops/test.sh installs it)")
    async with _ops(sshd, role) as ops:  # auto: a target whose agent cannot start would fall back to ssh
        with anyio.fail_after(60):
            state = await ops.prepare(role)
            raw = await ops.exec_raw(role, ["echo", "carried"])
            meta, _ = await ops.agent_request(role, proto.STAT, {"path": "/"})
    assert state.carrier == "agent"
    assert state.reason is None
    assert state.agent_build == current_build()
    assert raw.carrier == "agent"
    assert raw.stdout.head == b"carried\n"  # the command's output only: the banner came before the agent
    assert meta["type"] == "directory"


async def test_a_file_tool_on_a_banner_target_uses_the_agent_it_boots(sshd: SshdInstance) -> None:
    async with _ops(sshd, "bashrc") as ops:
        with anyio.fail_after(60):
            meta, _ = await ops.agent_request("bashrc", proto.STAT, {"path": "/"})
        state = ops.stats().carriers["bashrc"]
    assert meta["type"] == "directory"
    assert state.carrier == "agent"
    assert state.channels_started == 1


async def _run_loader(boot: AgentBoot, prefix: str) -> bytes:
    """The loader under ``sh -c`` after ``prefix`` (shell text printing noise), fed ``boot``'s source."""
    async with supervised_child(["sh", "-c", prefix + boot.command()], stdin=subprocess.PIPE) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        await proc.stdin.send(boot.source)
        await proc.stdin.aclose()
        out = b""
        with anyio.fail_after(15):
            try:
                while True:
                    out += await proc.stdout.receive(65536)
            except anyio.EndOfStream:
                pass
            await proc.wait()
    return out


async def test_the_loader_marks_the_start_on_stdout_and_passes_the_build_id_to_the_program() -> None:
    program = b'import os\nos.write(1, (__name__ + "|" + __rog_build__).encode())\n'
    boot = AgentBoot(source=program, build=hashlib.sha256(program).hexdigest(), nonce="feed" * 8)
    # the shell prints noise first, including the command's own nonce: only the derived marker counts
    out = await _run_loader(boot, f"echo 'Welcome {boot.nonce}'; printf 'partial'; echo noise >&2; ")
    start = StartScanner(boot.marker)
    after = start.feed(out)
    assert start.started
    assert boot.nonce.encode() not in boot.marker
    assert after == f"__rog_agent__|{boot.build}".encode()


async def test_each_boot_has_its_own_marker() -> None:
    first, second = new_boot(), new_boot()
    assert first.marker != second.marker
    assert first.build == second.build == current_build()


@settings(max_examples=examples(200), deadline=None)
@given(
    noise=st.binary(max_size=3000),
    payload=st.binary(max_size=500),
    cuts=st.lists(st.integers(0, 4000), max_size=8),
)
def test_the_scanner_returns_exactly_what_follows_the_marker_however_the_stream_is_cut(
    noise: bytes, payload: bytes, cuts: list[int]
) -> None:
    boot = new_boot()
    marker = boot.marker
    noise = noise.replace(marker, b"")
    stream = noise + marker[:-3] + noise[:5] + marker + payload  # a partial marker first
    scanner = StartScanner(marker)
    out = b""
    last = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        out += scanner.feed(stream[last:cut])
        last = cut
    assert scanner.started
    assert out == stream[stream.find(marker) + len(marker) :]  # the first marker: the loader's own
    assert out.endswith(payload)


async def test_boot_command_starts_the_agent_behind_a_marker_of_its_own() -> None:
    source = new_boot().source
    async with supervised_child(["sh", "-c", boot_command()], stdin=subprocess.PIPE) as proc:
        agent = Agent(proc)  # drops the marker line whatever its nonce
        await agent.send(source)
        frame = await _hello(agent)
    assert frame[1] == proto.HELLO
    assert frame[3] is not None
    assert frame[3]["pid"] > 0
