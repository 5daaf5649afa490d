"""A stdio upstream's streams: stdout that is not UTF-8 is decoded with replacement (it connects and serves),
stderr goes line by line to the callback the embedding application gives, and a command that cannot be
started is named and retried with growing delays (real fault-upstream processes)."""

from __future__ import annotations

import anyio
import pytest

from tests.upstream.conftest import StdioFault
from upstream import StderrLine, Upstream, UpstreamHealth, UpstreamSettings

pytestmark = pytest.mark.anyio


async def test_a_stdio_upstream_writing_bytes_that_are_not_utf8_on_stdout_connects_and_serves(
    fault_stdio: StdioFault,
) -> None:
    settings = fault_stdio.settings()
    settings = settings.model_copy(update={"command": [*settings.command, "--stdout-junk"]})
    async with Upstream(settings) as up:
        with anyio.fail_after(20):
            health = await up.wait_for(lambda h: h.state == "connected" or h.connect_attempts > 1)
            result = await up.call_tool("echo", {"text": "café"})
    assert health.state == "connected"
    assert health.connect_attempts == 1  # first time, no silent retry loop
    assert result.structured_content == {"text": "café"}


async def test_stderr_lines_reach_the_callback_one_by_one_named_and_bounded(fault_stdio: StdioFault) -> None:
    got: list[StderrLine] = []
    arrived = anyio.Event()

    def on_stderr(line: StderrLine) -> None:
        got.append(line)
        if line.text == "last":
            arrived.set()

    async with Upstream(fault_stdio.settings(), on_stderr=on_stderr) as up:
        with anyio.fail_after(20):
            await up.call_tool("shout", {"text": "one", "repeat": 2})
            await up.call_tool("shout", {"text": "wide", "length": 10_000})
            await up.call_tool("shout", {"text": "last"})
            await arrived.wait()
    texts = [line.text for line in got]
    assert texts.count("one") == 2
    [wide] = [line for line in got if line.text.startswith("wide")]
    assert (wide.truncated, len(wide.text)) == (True, 4096)
    assert texts.index("one") < texts.index(wide.text) < texts.index("last")
    assert {line.upstream for line in got} == {"fault-stdio"}


async def test_a_command_not_on_path_is_named_and_retried_with_growing_delays() -> None:
    settings = UpstreamSettings(
        name="absent",
        transport="stdio",
        command=["libtmux-mcp-not-installed-4d2a"],
        backoff_initial_s=0.05,
        backoff_max_s=0.4,
        backoff_jitter=0.0,
    )
    delays: list[float] = []

    def seen(h: UpstreamHealth) -> bool:
        delay = h.retry_delay_s
        if delay is not None and (not delays or delays[-1] != delay):
            delays.append(delay)
        return len(delays) >= 4

    async with Upstream(settings) as up:
        with anyio.fail_after(20):
            health = await up.wait_for(seen)
    assert health.last_error_class == "FileNotFoundError"
    assert health.last_error is not None
    assert "'libtmux-mcp-not-installed-4d2a'" in health.last_error
    assert health.consecutive_failures >= 4
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]


async def test_a_traceback_on_stderr_is_one_record_its_error_line_stays_visible_and_blank_lines_are_dropped(
    fault_stdio: StdioFault,
) -> None:
    got: list[StderrLine] = []
    arrived = anyio.Event()

    def on_stderr(line: StderrLine) -> None:
        got.append(line)
        if line.text == "last":
            arrived.set()

    trace = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    boom()\n\n   \n'
    async with Upstream(fault_stdio.settings(), on_stderr=on_stderr) as up:
        with anyio.fail_after(20):
            await up.call_tool("shout", {"text": trace + "ValueError: bad"})
            await up.call_tool("shout", {"text": "last"})
            await arrived.wait()
    texts = [line.text for line in got]
    assert all(text.strip() for text in texts)  # the blank and whitespace-only lines are gone
    [frames] = [line for line in got if line.text.startswith("Traceback")]
    assert frames.lines == 3
    assert frames.text == trace.split("\n\n")[0]
    assert "ValueError: bad" in texts  # the error itself is a record of its own, not buried
