"""ssh's own failures name their cause: an unresolvable host is an unknown target, details are whole lines."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._errmap import translate
from gateway._errors import ErrorCode
from remoteops import ConnectError, RemoteOps, TargetSpec, TransportSettings, UnknownTarget, UnresolvedHost
from remoteops.ssh.args import tail_lines

# A label longer than 63 bytes is refused by the stub resolver itself: the lookup fails on this machine
# without a DNS query leaving it (``nonexistent.invalid`` would still be sent to the configured name server).
UNRESOLVABLE = "x" * 64 + ".invalid"


@pytest.fixture
def empty_ssh_config() -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="ro-unres-", dir="/tmp"))
    (work / "ssh_config").write_text("")
    try:
        yield work / "ssh_config"
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "required", "off"])
@pytest.mark.parametrize("carrier", ["auto", "agent", "ssh"])
async def test_a_host_name_that_does_not_resolve_is_an_unknown_target_in_every_mode(
    empty_ssh_config: Path, mode: str, carrier: str
) -> None:
    settings = TransportSettings.model_validate(
        {
            "ssh_config_file": empty_ssh_config,
            "control_dir": empty_ssh_config.parent / "c",
            "multiplex": mode,
            "carrier": carrier,
        }
    )
    async with RemoteOps(settings, [TargetSpec(name="nowhere", host=UNRESOLVABLE)]) as ops:
        with anyio.fail_after(30), pytest.raises(UnknownTarget) as info:
            await ops.run("nowhere", ["true"])
        stats = ops.stats()
    error = info.value
    assert isinstance(error, UnresolvedHost)
    assert isinstance(error, ConnectError)  # seen at connect time: still a connect failure to old callers
    assert error.reason == "unknown_host"
    assert (error.target, error.host) == ("nowhere", UNRESOLVABLE)
    assert stats.fallbacks == 0  # not retried as a one-shot connection: it would fail the same way
    assert stats.masters_created == 0
    failure = translate(error)
    assert failure is not None
    assert failure.code == ErrorCode.UNKNOWN_TARGET
    assert failure.retryable is False


@pytest.mark.anyio
async def test_an_ssh_g_that_does_not_answer_in_time_is_a_retryable_connect_error_not_an_unknown_target(
    empty_ssh_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A gateway host too busy to run ``ssh -G`` in time says nothing about the target's name.
    import remoteops.ssh.resolve as resolve

    slow = empty_ssh_config.parent / "slow-ssh"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(resolve, "_RESOLVE_S", 0.3)
    settings = TransportSettings.model_validate(
        {
            "ssh_config_file": empty_ssh_config,
            "control_dir": empty_ssh_config.parent / "c",
            "ssh_binary": str(slow),
        }
    )
    async with RemoteOps(settings, [TargetSpec(name="busy", host="127.0.0.1")]) as ops:
        with anyio.fail_after(30), pytest.raises(ConnectError) as info:
            await ops.run("busy", ["true"])
    assert not isinstance(info.value, UnknownTarget)
    assert (info.value.reason, info.value.stage, info.value.target) == ("timeout", "resolve", "busy")
    failure = translate(info.value)
    assert failure is not None
    assert failure.code == ErrorCode.CONNECT_ERROR
    assert failure.retryable is True


LINE = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"))


@settings(deadline=None)  # a property, not a timing: a loaded machine may pause one example
@given(lines=st.lists(LINE, max_size=40), limit=st.integers(min_value=20, max_value=700))
def test_error_details_are_the_last_whole_lines_that_fit(lines: list[str], limit: int) -> None:
    source = [line.rstrip() for line in "\n".join(lines).strip().splitlines() if line.strip()]
    shown = tail_lines("\n".join(lines), limit)
    if not source:
        assert shown == ""
    elif len(source[-1]) + 1 > limit:  # one line longer than the limit: cut at a word, marked
        assert shown.endswith(" …")
        assert source[-1].startswith(shown.removesuffix(" …"))
        assert len(shown) <= limit
    else:
        kept = shown.split("\n")
        assert kept == source[len(source) - len(kept) :]
        assert len(shown) <= limit
        if len(kept) < len(source):  # the next older line would not have fitted
            assert len(shown) + 1 + len(source[-len(kept) - 1]) + 1 > limit
