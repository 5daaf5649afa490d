"""Fleet runs against the real OpenSSH sshd: many aliases of one sshd are distinct targets (their own
identity, master and agent), a second throwaway sshd stopped with SIGSTOP is a hung target. What ran, and
how many at once, is observed on the targets themselves (each command records its start and end)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acceptance.harness.fleet_hosts import FleetHosts, write_fleet_config
from remoteops import (
    ConnectError,
    ExecResult,
    FleetPlan,
    FleetRunner,
    RemoteOps,
    TargetRecord,
    TargetSpec,
    exec_succeeded,
)
from tests.fixtures.procs import processes_mentioning
from tests.fixtures.sshd import SshdInstance, start_sshd
from tests.remoteops.conftest import OpsFactory

# each run leaves one file on the target: its start and end time (the target's own clock)
RECORD = 'f=$(mktemp "$D/run.XXXXXX") && date +%s.%N > "$f" && sleep {pause} && date +%s.%N >> "$f"'


@pytest.fixture
def fleet_dir(shared_dir: Path) -> Path:
    return shared_dir


def exec_job(
    ops: RemoteOps,
    argv: list[str] | None,
    shell: str | None,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float,
) -> Callable[[str], Awaitable[ExecResult]]:
    """What the gateway's exec_many gives each target: ``RemoteOps.run``, the path remote_exec takes."""

    async def job(target: str) -> ExecResult:
        return await ops.run(target, argv, shell, env=env, timeout_s=timeout_s)

    return job


@asynccontextmanager
async def fleet_ops(
    ops_factory: OpsFactory, sshd: SshdInstance, count: int, extra: tuple[str, ...] = (), **overrides: Any
) -> AsyncIterator[tuple[RemoteOps, FleetHosts]]:
    """RemoteOps over ``count`` aliases of the fixture sshd (plus its ``extra`` roles as targets)."""
    with tempfile.TemporaryDirectory(prefix="rogfc-") as cfg_dir:
        hosts = write_fleet_config(Path(cfg_dir), [sshd], count, include=sshd.ssh_config)
        targets = [TargetSpec(name=a, host=a) for a in hosts.aliases]
        targets += [TargetSpec(name=role, host=sshd.alias(role)) for role in extra]
        async with ops_factory(targets, ssh_config_file=hosts.ssh_config, **overrides) as ops:
            yield ops, hosts


def _intervals(directory: Path) -> list[tuple[float, float]]:
    out = []
    for path in directory.glob("run.*"):
        start, end = (float(line) for line in path.read_text().split())
        out.append((start, end))
    return out


async def _all_gone(marker: str) -> None:
    """Until no process carries ``marker`` in its environment (the exec seam kills them; bounded)."""
    with anyio.fail_after(30):
        while processes_mentioning(marker, environ=True):  # noqa: ASYNC110 - processes on the targets
            await anyio.sleep(0.05)


def _kill_marked(marker: str) -> None:
    for pid in processes_mentioning(marker, environ=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _peak_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


@pytest.mark.anyio
async def test_fifty_targets_with_forks_8_never_have_more_than_8_in_flight_on_the_targets(
    ops_factory: OpsFactory, sshd: SshdInstance, fleet_dir: Path
) -> None:
    baseline = _fds()
    # more targets than masters: the pool closes the least recently used ones (and their agents)
    async with fleet_ops(ops_factory, sshd, 50, max_masters=16) as (ops, hosts):
        masters: list[int] = []
        fds: list[int] = []

        async def watch(record: TargetRecord[ExecResult], done: int, total: int) -> None:
            masters.append(ops.stats().live_masters)
            fds.append(_fds())

        job = exec_job(ops, None, RECORD.format(pause="0.3"), env={"D": str(fleet_dir)}, timeout_s=30)
        runner = FleetRunner(hosts.aliases, FleetPlan(forks=8), job, succeeded=exec_succeeded, on_done=watch)
        with anyio.fail_after(240):
            run = await runner.run()
    assert [r.target for r in run.records] == list(hosts.aliases)
    assert {r.outcome for r in run.records} == {"succeeded"}, [
        (r.target, r.outcome, r.error) for r in run.records if r.outcome != "succeeded"
    ]
    intervals = _intervals(fleet_dir)
    assert len(intervals) == 50
    assert 2 <= _peak_overlap(intervals) <= 8
    assert run.max_in_flight == 8
    assert len(masters) == 50
    assert max(masters) <= 16
    # descriptors follow the caps (masters, forks), not the number of targets; none is left afterwards
    assert max(fds) - baseline <= 8 * (16 + 8), (baseline, max(fds))
    assert _fds() <= baseline + 4


@pytest.mark.anyio
async def test_serial_2_with_failures_in_the_second_batch_and_max_failures_1_runs_two_batches(
    ops_factory: OpsFactory, sshd: SshdInstance, fleet_dir: Path
) -> None:
    # the second batch: a target whose key is refused and one whose port is closed (real failures)
    async with fleet_ops(ops_factory, sshd, 6, ("wrongkey", "closed")) as (ops, hosts):
        ok = list(hosts.aliases)
        order = [ok[0], ok[1], "wrongkey", "closed", *ok[2:]]
        job = exec_job(ops, None, RECORD.format(pause="0"), env={"D": str(fleet_dir)}, timeout_s=30)
        plan = FleetPlan(serial=2, max_failures=1, forks=4)
        with anyio.fail_after(120):
            run = await FleetRunner(order, plan, job, succeeded=exec_succeeded).run()
    got = [(r.target, r.outcome, r.batch, r.reason) for r in run.records]
    assert got[:4] == [
        (ok[0], "succeeded", 1, None),
        (ok[1], "succeeded", 1, None),
        ("wrongkey", "error", 2, None),
        ("closed", "error", 2, None),
    ]
    assert got[4:] == [(name, "skipped", None, "failure_budget") for name in ok[2:]]
    assert run.batches == 2
    assert run.stopped == "failure_budget"
    assert type(run.records[2].error).__name__ == "AuthError"
    assert isinstance(run.records[3].error, ConnectError)
    assert len(_intervals(fleet_dir)) == 2  # on the targets: exactly the two that succeeded ran


@pytest.mark.anyio
async def test_a_failed_canary_starts_nothing_else(
    ops_factory: OpsFactory, sshd: SshdInstance, fleet_dir: Path
) -> None:
    async with fleet_ops(ops_factory, sshd, 4) as (ops, hosts):
        # every command exits 1 on the target (after recording that it ran): the canary fails
        shell = RECORD.format(pause="0") + " && exit 1"
        job = exec_job(ops, None, shell, env={"D": str(fleet_dir)}, timeout_s=30)
        with anyio.fail_after(60):
            run = await FleetRunner(hosts.aliases, FleetPlan(canary=1), job, succeeded=exec_succeeded).run()
    assert [(r.outcome, r.reason) for r in run.records] == [("failed", None)] + [
        ("skipped", "canary_failed")
    ] * 3
    assert run.records[0].value is not None
    assert run.records[0].value.exit_code == 1
    assert len(_intervals(fleet_dir)) == 1


@pytest.mark.anyio
async def test_a_hung_target_does_not_delay_the_others_results(
    ops_factory: OpsFactory, sshd: SshdInstance
) -> None:
    with tempfile.TemporaryDirectory(prefix="rogfc-") as cfg_dir, start_sshd() as hung:
        hosts = write_fleet_config(Path(cfg_dir), [hung, sshd], 5)
        stuck, healthy = hosts.by_sshd[0][0], list(hosts.by_sshd[1])
        names = [stuck, *healthy]
        targets = [TargetSpec(name=a, host=a) for a in names]
        os.kill(hung.pid, signal.SIGSTOP)  # accepts TCP (the kernel's backlog), never answers
        try:
            async with ops_factory(targets, ssh_config_file=hosts.ssh_config, connect_timeout_s=8) as ops:
                finished: dict[str, float] = {}
                t0 = time.monotonic()

                async def note(record: TargetRecord[ExecResult], done: int, total: int) -> None:
                    finished[record.target] = time.monotonic() - t0

                job = exec_job(ops, ["true"], None, timeout_s=5)
                runner = FleetRunner(
                    names,
                    FleetPlan(forks=6),
                    job,
                    succeeded=exec_succeeded,
                    on_done=note,
                    target_ceiling_s=15,
                )
                with anyio.fail_after(60):
                    run = await runner.run()
        finally:
            os.kill(hung.pid, signal.SIGCONT)
    by_name = {r.target: r for r in run.records}
    assert {by_name[n].outcome for n in healthy} == {"succeeded"}
    assert by_name[stuck].outcome == "error"
    assert isinstance(by_name[stuck].error, ConnectError), by_name[stuck].error
    slowest_healthy = max(finished[n] for n in healthy)
    assert finished[stuck] >= 7.5  # it waited for its own connect timeout (8 s: room for a loaded machine)
    assert slowest_healthy < finished[stuck] - 2.0, finished
    # each healthy result arrived in its own time: no longer than its own run plus the start of the fleet
    for name in healthy:
        record = by_name[name]
        assert record.started_s is not None
        assert record.duration_s is not None
        assert finished[name] <= record.started_s + record.duration_s + 1.0


@pytest.mark.anyio
async def test_cancel_starts_no_new_target_and_kills_the_running_commands(
    ops_factory: OpsFactory, sshd: SshdInstance, fleet_dir: Path
) -> None:
    marker = f"rogfleetcancel-{uuid.uuid4().hex}"
    shell = 'echo x >> "$D/started" && exec sleep 313'
    try:
        async with fleet_ops(ops_factory, sshd, 6) as (ops, hosts):
            job = exec_job(ops, None, shell, env={"D": str(fleet_dir), "ROG_TEST_MARK": marker}, timeout_s=60)
            runner = FleetRunner(hosts.aliases, FleetPlan(forks=3), job, succeeded=exec_succeeded)
            async with anyio.create_task_group() as tg:

                async def cancel_when_three_run() -> None:
                    while _lines(fleet_dir / "started") < 3:  # noqa: ASYNC110 - written on the targets
                        await anyio.sleep(0.05)
                    runner.cancel()

                tg.start_soon(cancel_when_three_run)
                with anyio.fail_after(60):
                    run = await runner.run()
            await _all_gone(marker)
    finally:
        _kill_marked(marker)
    assert [(r.outcome, r.reason) for r in run.records] == [("cancelled", "cancelled")] * 3 + [
        ("skipped", "cancelled")
    ] * 3
    assert (fleet_dir / "started").read_text() == "x\n" * 3  # on the targets: the other three never ran


@pytest.mark.anyio
async def test_the_overall_time_limit_stops_the_run_and_kills_what_runs(
    ops_factory: OpsFactory, sshd: SshdInstance, fleet_dir: Path
) -> None:
    marker = f"rogfleetlimit-{uuid.uuid4().hex}"
    env = {"D": str(fleet_dir), "ROG_TEST_MARK": marker}
    try:
        async with fleet_ops(ops_factory, sshd, 4) as (ops, hosts):
            job = exec_job(ops, None, 'echo x >> "$D/started" && exec sleep 314', env=env, timeout_s=60)
            plan = FleetPlan(forks=2)
            runner = FleetRunner(hosts.aliases, plan, job, succeeded=exec_succeeded, overall_timeout_s=3)
            started = time.monotonic()
            with anyio.fail_after(60):
                run = await runner.run()
            elapsed = time.monotonic() - started
            await _all_gone(marker)
    finally:
        _kill_marked(marker)
    assert [(r.outcome, r.reason) for r in run.records] == [("cancelled", "overall_timeout")] * 2 + [
        ("skipped", "overall_timeout")
    ] * 2
    assert 2.5 < elapsed < 30
    assert run.stopped == "overall_timeout"
    assert (fleet_dir / "started").read_text() == "x\n" * 2
