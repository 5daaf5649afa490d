"""The fleet engine's pure parts: selectors against the allow-list and grants, batch sizes and the failure
budget, and the runner's scheduling over jobs that are plain coroutines (the real-target behaviour is
tests/remoteops/test_fleet.py)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from pydantic import ValidationError

from remoteops import (
    FleetPlan,
    FleetRunner,
    InvalidRequest,
    LabelMatch,
    Selector,
    TargetRecord,
    TargetSpec,
    group_identical,
    resolve_selector,
)
from remoteops.fleet.plan import batch_sizes, tolerated

TARGETS = [
    TargetSpec(name="web1", host="h1", labels={"role": "web", "env": "prod"}),
    TargetSpec(name="web2", host="h2", labels={"role": "web", "env": "prod"}),
    TargetSpec(name="web3", host="h3", labels={"role": "web", "env": "test"}),
    TargetSpec(name="db1", host="h4", labels={"role": "db", "env": "prod"}),
    TargetSpec(name="db2", host="h5", labels={"role": "db", "env": "prod"}),
]
GROUPS = {"prod-web": (LabelMatch(labels={"role": "web", "env": "prod"}),), "mixed": ("db2", "web3", "db2")}


def test_a_label_selector_keeps_the_configured_order() -> None:
    got = resolve_selector(Selector(labels={"role": "web"}), TARGETS, GROUPS)
    assert got.selected == ("web1", "web2", "web3")
    assert got.denied == ()


def test_a_group_expands_names_and_label_members_once_in_member_order() -> None:
    assert resolve_selector(Selector(group="mixed"), TARGETS, GROUPS).selected == ("db2", "web3")
    assert resolve_selector(Selector(group="prod-web"), TARGETS, GROUPS).selected == ("web1", "web2")


def test_every_criterion_given_must_hold() -> None:
    got = resolve_selector(Selector(group="mixed", labels={"role": "db"}), TARGETS, GROUPS)
    assert got.selected == ("db2",)


def test_an_explicit_list_keeps_its_order_and_lists_unknown_names_as_denied() -> None:
    got = resolve_selector(Selector(targets=["db1", "nope", "web1"]), TARGETS, GROUPS)
    assert got.selected == ("db1", "web1")
    [(name, exc)] = got.denied
    assert (name, exc.reason) == ("nope", "not_configured")


def test_grants_covering_part_of_a_group_deny_the_rest_by_name() -> None:
    got = resolve_selector(Selector(labels={"env": "prod"}), TARGETS, GROUPS, lambda n: n.startswith("web"))
    assert got.selected == ("web1", "web2")
    assert [(n, e.reason, e.target) for n, e in got.denied] == [
        ("db1", "not_granted", "db1"),
        ("db2", "not_granted", "db2"),
    ]


def test_an_unknown_group_or_an_empty_match_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as unknown:
        resolve_selector(Selector(group="nope"), TARGETS, GROUPS)
    assert unknown.value.field == "group"
    with pytest.raises(InvalidRequest) as empty:
        resolve_selector(Selector(labels={"role": "cache"}), TARGETS, GROUPS)
    assert empty.value.reason == "empty"
    with pytest.raises(InvalidRequest) as many:
        resolve_selector(Selector(labels={"role": "web"}), TARGETS, GROUPS, max_targets=2)
    assert many.value.reason == "too_many"


def test_a_selector_needs_a_criterion() -> None:
    with pytest.raises(ValidationError):
        Selector()


@pytest.mark.parametrize(
    ("total", "plan", "sizes"),
    [
        (10, FleetPlan(), [10]),
        (10, FleetPlan(serial=3), [3, 3, 3, 1]),
        (10, FleetPlan(serial="25%"), [2, 2, 2, 2, 2]),
        (10, FleetPlan(serial="1%"), [1] * 10),
        (10, FleetPlan(canary=1, serial=4), [1, 4, 4, 1]),
        (2, FleetPlan(canary=5), [2]),
        (0, FleetPlan(canary=1), []),
    ],
)
def test_batch_sizes_put_the_canary_first_then_serial_batches(
    total: int, plan: FleetPlan, sizes: list[int]
) -> None:
    assert batch_sizes(total, plan) == sizes


def test_the_failure_budget_is_a_count_or_a_percentage_rounded_down() -> None:
    assert tolerated(10, FleetPlan()) is None
    assert tolerated(10, FleetPlan(max_failures=0)) == 0
    assert tolerated(10, FleetPlan(max_failures=2)) == 2
    assert tolerated(10, FleetPlan(max_failures="25%")) == 2
    assert tolerated(200, FleetPlan(max_failures="10%")) == 20


@pytest.mark.parametrize("bad", [{"serial": 0}, {"serial": "0%"}, {"serial": "x"}, {"max_failures": "101%"}])
def test_plan_counts_are_checked(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FleetPlan.model_validate(bad)


def test_identical_outputs_form_one_group_largest_first() -> None:
    groups = group_identical([("a", 1), ("b", 2), ("c", 2), ("d", 1), ("e", 2)])
    assert groups == [(2, ["b", "c", "e"]), (1, ["a", "d"])]


async def _run(names: list[str], plan: FleetPlan, fail: set[str]) -> list[TargetRecord[int]]:
    async def job(name: str) -> int:
        await anyio.lowlevel.checkpoint()
        return 1 if name in fail else 0

    run = await FleetRunner(names, plan, job, succeeded=lambda v: v == 0).run()
    return run.records


@pytest.mark.anyio
async def test_the_budget_stops_new_batches_and_skips_the_rest_with_the_reason() -> None:
    names = [f"t{i}" for i in range(8)]
    records = await _run(names, FleetPlan(serial=2, max_failures=1, forks=8), {"t2", "t3"})
    assert [r.outcome for r in records] == ["succeeded"] * 2 + ["failed"] * 2 + ["skipped"] * 4
    assert {r.reason for r in records[4:]} == {"failure_budget"}
    assert [r.batch for r in records[:4]] == [1, 1, 2, 2]


@pytest.mark.anyio
async def test_a_failed_canary_starts_nothing_else() -> None:
    records = await _run(["a", "b", "c"], FleetPlan(canary=1), {"a"})
    assert [(r.outcome, r.reason) for r in records] == [
        ("failed", None),
        ("skipped", "canary_failed"),
        ("skipped", "canary_failed"),
    ]
    assert records[0].batch == 0


@pytest.mark.anyio
async def test_a_job_that_raises_is_that_targets_error_and_counts_against_the_budget() -> None:
    async def job(name: str) -> int:
        if name == "b":
            raise InvalidRequest(target=name, field="x", reason="bad")
        return 0

    plan = FleetPlan(forks=1, max_failures=0)
    run = await FleetRunner(["a", "b", "c"], plan, job, succeeded=lambda v: v == 0).run()
    assert [r.outcome for r in run.records] == ["succeeded", "error", "skipped"]
    assert isinstance(run.records[1].error, InvalidRequest)
    assert run.stopped == "failure_budget"


@pytest.mark.anyio
async def test_cancel_stops_starting_and_cancels_the_running_jobs() -> None:
    started = anyio.Event()

    async def job(name: str) -> int:
        started.set()
        await anyio.sleep_forever()
        return 0

    runner = FleetRunner(["a", "b", "c"], FleetPlan(forks=2), job, succeeded=lambda v: v == 0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_when, started, runner)
        with anyio.fail_after(10):
            run = await runner.run()
    assert [(r.outcome, r.reason) for r in run.records] == [
        ("cancelled", "cancelled"),
        ("cancelled", "cancelled"),
        ("skipped", "cancelled"),
    ]


async def _cancel_when(event: anyio.Event, runner: FleetRunner[int]) -> None:
    await event.wait()
    await anyio.lowlevel.checkpoint()
    runner.cancel()


@pytest.mark.anyio
async def test_a_job_past_its_ceiling_is_stopped_as_a_timeout_while_the_others_finish() -> None:
    async def job(name: str) -> int:
        if name == "slow":
            await anyio.sleep_forever()
        return 0

    runner = FleetRunner(
        ["slow", "a", "b"], FleetPlan(), job, succeeded=lambda v: v == 0, target_ceiling_s=0.2
    )
    with anyio.fail_after(10):
        run = await runner.run()
    assert [r.outcome for r in run.records] == ["error", "succeeded", "succeeded"]
    assert type(run.records[0].error).__name__ == "CommandTimeout"
