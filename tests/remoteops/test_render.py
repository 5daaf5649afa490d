"""The one rendering function: argv is data, through the real target and through the local /bin/sh."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoteops import RemoteOps, render_command
from remoteops._capture import HeadTail, clip
from remoteops._render import parse_markers
from remoteops.ssh.resolve import parse_ssh_g
from tests.fixtures.profiles import examples
from tests.remoteops.conftest import OpsFactory

NASTY = [
    "", " ", "'", '"', "\\", "$(id)", "`id`", "${HOME}", "$HOME", ";", "&&", "|", "\n", "a\nb", "-n", "-e",
    "--", "-", "*", "?", "~", "#", "!", "é✓漢字", "\t", "\r", "%s", "%%", "a b", "'$(touch /tmp/rog-pwned)'",
]  # fmt: skip
WORD = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20),
)
ARGS = st.lists(WORD, max_size=8)


def expected(args: list[str]) -> str:
    return "".join(a + "\0" for a in args) if args else "\0"


@pytest.fixture(params=["agent", "ssh"])
def carrier_ops(
    request: pytest.FixtureRequest, ops_factory: OpsFactory
) -> Iterator[tuple[BlockingPortal, RemoteOps]]:
    """One RemoteOps on one carrier, living in a portal thread (hypothesis tests are sync)."""
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(ops_factory(carrier=request.param)) as ops,
    ):
        yield portal, ops


@pytest.mark.sshd
@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=ARGS)
def test_any_argv_executes_literally_on_the_target_over_either_carrier(
    carrier_ops: tuple[BlockingPortal, RemoteOps], args: list[str]
) -> None:
    portal, ops = carrier_ops
    raw = portal.call(lambda: ops.exec_raw("plain", ["printf", "%s\\0", *args]))
    assert raw.carrier == ops.stats().carriers["plain"].mode
    assert raw.exit_code == 0
    assert raw.stdout.head + raw.stdout.tail == expected(args).encode()
    assert raw.stderr.head + raw.stderr.tail == b""


@settings(max_examples=examples(150), deadline=None)
@given(args=ARGS, cwd=st.sampled_from([None, "/", "/tmp"]))
def test_any_argv_round_trips_through_the_local_sh(args: list[str], cwd: str | None) -> None:
    rendered = render_command(["printf", "%s\\0", *args], time_limit_s=10, cwd=cwd)
    proc = subprocess.run(["sh", "-c", rendered.text], capture_output=True, check=False, timeout=10)
    markers = parse_markers(rendered, proc.stderr, b"", 0)
    assert markers.started
    assert markers.exit_code == 0
    assert markers.head == b""
    assert proc.stdout.decode() == expected(args)


@pytest.mark.parametrize("use_timeout_binary", [True, False])
def test_remote_time_limit_stops_the_command_with_and_without_timeout_binary(
    use_timeout_binary: bool,
) -> None:
    # the sh watchdog (no `timeout` on the target) signals the direct child only: no grandchildren here
    rendered = render_command(
        ["sleep", "30"], time_limit_s=0.3, kill_after_s=1, use_timeout_binary=use_timeout_binary
    )
    started = time.monotonic()
    proc = subprocess.run(["sh", "-c", rendered.text], capture_output=True, check=False, timeout=25)
    markers = parse_markers(rendered, proc.stderr, b"", 0)
    # the limit (0.3 s) and the kill grace (1 s) with a loaded machine's headroom, far below the sleep's 30 s
    assert time.monotonic() - started < 15
    assert markers.exit_code in (124, 143)
    assert proc.returncode == markers.exit_code


def test_wrapper_passes_stdin_through_in_the_degraded_watchdog_path() -> None:
    rendered = render_command(["cat"], time_limit_s=5, use_timeout_binary=False)
    proc = subprocess.run(["sh", "-c", rendered.text], input=b"payload\n", capture_output=True, timeout=10)
    assert proc.stdout == b"payload\n"


@pytest.mark.parametrize(
    "argv",
    [[], [""], ["a\0b"]],
)
def test_invalid_argv_is_rejected_before_anything_runs(argv: list[str]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is not the contract
        render_command(argv, time_limit_s=1)


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "", "A=B"])
def test_invalid_env_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="environment variable name"):
        render_command(["true"], time_limit_s=1, env={name: "x"})


@settings(max_examples=examples(200), deadline=None)  # a property, not a timing: no per-example deadline
@given(data=st.binary(max_size=3000), cap=st.integers(min_value=4, max_value=1000), chunk=st.integers(1, 700))
def test_head_tail_capture_keeps_head_and_tail_and_counts_dropped(data: bytes, cap: int, chunk: int) -> None:
    buf = HeadTail(cap // 2, cap - cap // 2)
    for i in range(0, len(data), chunk):
        buf.feed(data[i : i + chunk])
    kept, dropped = clip(buf.head, buf.tail, buf.gap, cap)
    if len(data) <= cap:
        assert (kept, dropped) == (data, 0)
    else:
        assert kept == data[: cap // 2] + data[len(data) - (cap - cap // 2) :]
        assert dropped == len(data) - cap


def test_ssh_g_output_becomes_a_stable_identity() -> None:
    text = (
        "user deploy\nhostname 10.0.0.5\nport 2222\nproxyjump bastion,inner\nidentityfile ~/.ssh/a\n"
        "identityfile ~/.ssh/b\nuserknownhostsfile ~/.ssh/known_hosts\n"
    )
    identity = parse_ssh_g(text)
    assert identity.user == "deploy"
    assert identity.port == 2222
    assert identity.proxyjump == ("bastion", "inner")
    assert identity.identity_files == ("~/.ssh/a", "~/.ssh/b")
    assert parse_ssh_g(text).identity_hash == identity.identity_hash
    assert parse_ssh_g(text.replace("2222", "22")).identity_hash != identity.identity_hash
