"""``session = "auto"`` on a target without tmux: the task falls back to ``setsid`` under its supervisor and
the record says so; ``session = "tmux"`` there is a missing capability, refused before anything runs.

The target is the embedded asyncssh target, whose sessions inherit this process's PATH: pointed at a
directory holding every program of /usr/bin and /bin except tmux, the target really has no tmux (and the
same target with the normal PATH does have it, which the first part of the test shows)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from remoteops import (
    RemoteOps,
    RemoteTasks,
    StateStore,
    TargetSpec,
    TaskCapabilityMissing,
    TaskSettings,
    TransportSettings,
)
from remoteops.embedded import EmbeddedTarget
from tests.remoteops.task_helpers import remote_root

pytestmark = pytest.mark.anyio


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ro-nt-", dir="/tmp"))  # short: ControlPath limit
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _bin_without_tmux(work: Path) -> Path:
    """Symlinks to every program of /usr/bin and /bin except tmux."""
    directory = work / "notmux-bin"
    directory.mkdir()
    for source in (Path("/usr/bin"), Path("/bin")):
        for program in source.iterdir():
            link = directory / program.name
            if program.name != "tmux" and not link.exists():
                link.symlink_to(program)
    return directory


@asynccontextmanager
async def _tasks(target: EmbeddedTarget, work: Path, root: Path, session: str) -> AsyncIterator[RemoteTasks]:
    transport = TransportSettings(ssh_config_file=target.ssh_config_path, control_dir=work / "c")
    async with (
        RemoteOps(transport, [TargetSpec(name="emb", host=target.alias)]) as ops,
        RemoteTasks(
            ops, StateStore(work / f"state-{session}"), TaskSettings(remote_dir=str(root), session=session),
            transport,
        ) as tasks,
    ):  # fmt: skip
        yield tasks


@pytest.mark.slow
async def test_auto_falls_back_to_setsid_on_a_target_without_tmux_and_says_so(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shutil.which("tmux") is not None, "this machine needs tmux (ops/test.sh installs it)"
    with remote_root() as root, remote_root() as auto_root, remote_root() as tmux_root:
        async with EmbeddedTarget(short_tmp / "w", alias="emb") as target:
            with anyio.fail_after(60):
                async with _tasks(target, short_tmp, root, "auto") as tasks:
                    with_tmux = await tasks.start("emb", ["true"])
                    await tasks.wait(with_tmux.id, timeout_s=30)
            monkeypatch.setenv("PATH", str(_bin_without_tmux(short_tmp)))  # the target's next sessions
            with anyio.fail_after(60):
                async with _tasks(target, short_tmp, auto_root, "auto") as tasks:
                    info = await tasks.start("emb", ["sh", "-c", "command -v tmux || echo no-tmux; exit 5"])
                    done = await tasks.wait(info.id, timeout_s=30)
                    out = await tasks.output(info.id)
                    status = await tasks.status(info.id)
                    running = await tasks.start("emb", ["sleep", "1000"])
                    cancelled = await tasks.cancel(running.id)
                async with _tasks(target, short_tmp, tmux_root, "tmux") as tasks:
                    with pytest.raises(TaskCapabilityMissing) as missing:
                        await tasks.start("emb", ["true"])
                    refused = tasks.list_tasks(target="emb")
    assert with_tmux.mode == "tmux"  # the same target with tmux on its PATH
    assert (info.mode, info.session) == ("setsid", None)  # the record says how it runs
    assert status.mode == "setsid"
    assert (done.outcome, done.exit_code) == ("exited", 5)
    assert out.data == "no-tmux\n"
    assert (running.mode, cancelled.step, cancelled.state) == ("setsid", "INT", "cancelled")
    assert missing.value.tool == "tmux"
    assert [(t.state, t.mode) for t in refused[0]] == [("failed", None)]
