"""Shared pytest configuration: asyncio is the only backend (asyncssh and uvicorn need it), the real
OpenSSH sshd (acceptance/harness/sshd.py) shared by the remoteops, gateway and privilege tests, and
libtmux-mcp on a private tmux server (acceptance/harness/libtmux.py) for the upstream and gateway relay tests.

Tiers follow what a test reaches, whoever wrote it (tests/fixtures/tiers.py has the rules): every test gets
exactly one of ``unit``, ``component``, ``system``, from its own body, every fixture in its closure and
every helper those call — fixtures and context managers alike (``libtmux.tmux_socket()``,
``surface_fault()`` …). Tests reaching the sshd also get ``sshd``. The old ``slow`` marker is an alias of
``system``: a test marked ``slow`` is a system test, and every system test is also marked ``slow``, so
``-m "not sshd and not slow"`` still selects exactly the fast tier, ``-m "not system"``. Applied here,
before ``-m`` selection, so the fast tier never starts an sshd, an upstream or a gateway process.

Under pytest-xdist each worker is its own session: the session-scoped ``sshd`` is one sshd per worker (own
port, work dir, keys, control-socket dir); the test users and their home directories are shared by all
workers, so tests keep what they write there under unique names. Tests sensitive to CPU load (stall,
liveness, watchdog, loop ticker) are grouped onto one worker (``xdist_group("timing")``, added here by
name; ops/test.sh runs ``--dist loadgroup``).

Hypothesis profiles (tests/fixtures/profiles.py): ``dev`` by default, ``ci`` under ./ops/test.sh
(derandomized, fewer examples), ``thorough`` by name (``HYPOTHESIS_PROFILE=thorough`` or
``--hypothesis-profile thorough``); loaded here, before any test module's
``@settings(max_examples=examples(n))`` runs.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fixtures.bytecode import cache_bytecode

_PROJECT = Path(__file__).resolve().parents[1]
cache_bytecode(_PROJECT)  # before the imports below compile the project

from tests.fixtures import libtmux, profiles  # noqa: E402
from tests.fixtures.sshd import SshdInstance, sshd_unavailable_reason, start_sshd  # noqa: E402
from tests.fixtures.tier_cache import KindsCache  # noqa: E402
from tests.fixtures.tiers import TIERS, kinds_reached, tier_of_kinds  # noqa: E402

profiles.register_profiles()
profiles.load_profile()

pytest_plugins = ["pytester"]  # tests/test_architecture.py runs the marker hook on a scratch suite

# Load-sensitive tests (they measure event-loop stalls, liveness deadlines, watchdog timing): one xdist worker
# runs them all, one after another, so that they never share the machine with each other.
TIMING_WORDS = ("stall", "liveness", "watchdog", "loop_ticker", "ticker", "timing", "blocked_loop")
TIMING_GROUP = "timing"
# Long poles, started first so that no worker begins one at the end of the run: the quick acceptance run
# (one module, ~2 min of fixture) and the timing group (a few minutes, one test after another).
FRONT_GROUPS = ("acceptance-quick", TIMING_GROUP)


def _group_name(mark: pytest.Mark) -> str:
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _front_rank(item: pytest.Item) -> int:
    group = item.get_closest_marker("xdist_group")
    name = _group_name(group) if group is not None else None
    return FRONT_GROUPS.index(name) if name in FRONT_GROUPS else len(FRONT_GROUPS)


def _fixture_functions(item: pytest.Item) -> list[object]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [fixturedef.func for defs in info.name2fixturedefs.values() for fixturedef in defs]


def _stated_tier(item: pytest.Item) -> str | None:
    stated = [tier for tier in TIERS if item.get_closest_marker(tier) is not None]
    if item.get_closest_marker("slow") is not None or item.get_closest_marker("sshd") is not None:
        stated.append("system")
    return max(stated, key=TIERS.index) if stated else None


def _kinds_of(item: pytest.Item, cache: KindsCache | None) -> frozenset[str]:
    cached = cache is not None and cache.covers(item.path)
    kinds = cache.get(item.nodeid) if cache is not None and cached else None
    if kinds is None:
        function = getattr(item, "function", None)
        kinds = kinds_reached([f for f in [function, *_fixture_functions(item)] if callable(f)])
        if cache is not None and cached:
            cache.put(item.nodeid, kinds)
    return kinds


def tier_of(item: pytest.Item, cache: KindsCache | None = None) -> tuple[str, frozenset[str]]:
    """The item's tier and the kinds it reaches (kept in ``cache`` between runs while no source changed);
    raises UsageError for a stated tier below a tagged helper."""
    kinds = _kinds_of(item, cache)
    detected = tier_of_kinds(kinds)
    strong = tier_of_kinds(kinds - {"process"})  # from tagged helpers alone
    stated = _stated_tier(item)
    if stated is None:
        return detected, kinds
    if TIERS.index(stated) < TIERS.index(strong):
        raise pytest.UsageError(
            f"{item.nodeid} is marked {stated} but reaches {sorted(kinds)}, which makes it {strong}"
        )
    return stated, kinds


def _is_timing(item: pytest.Item) -> bool:
    text = f"{item.nodeid}".lower()
    return any(word in text for word in TIMING_WORDS)


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    cache = KindsCache(_PROJECT)
    for item in items:
        tier, kinds = tier_of(item, cache)
        for name in TIERS:
            if name != tier and item.get_closest_marker(name) is not None:
                raise pytest.UsageError(f"{item.nodeid} states two tiers ({name} and {tier})")
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)
        if tier == "system" and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if "sshd" in kinds and item.get_closest_marker("sshd") is None:
            item.add_marker(pytest.mark.sshd)
        if _is_timing(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))
    cache.save()
    items.sort(key=_front_rank)  # stable: every other test keeps its collection order


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")  # after pytest-xdist's own hook
def pytest_collection_modifyitems_loadgroup(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup`` for pytest >= 9: a worker names a grouped test ``<nodeid>@<group>``, which is
    what the controller's LoadGroupScheduling keeps on one worker. pytest-xdist (3.8) sets ``item._nodeid``
    for that, which pytest 9 no longer reads (a node's id lives in ``item._id``): without this, every group
    was spread over all workers, and each worker handed a quick-acceptance test ran the whole quick run."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({_group_name(mark) for mark in item.iter_markers("xdist_group")})
        suffix = f"@{'_'.join(names)}"
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId  # pytest >= 9 only (older ones read xdist's _nodeid)

            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshdInstance]:
    """A throwaway sshd on 127.0.0.1 (users ro-plain, ro-sudo, ro-pass, root); skipped when not root."""
    reason = sshd_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with start_sshd() as instance:
        yield instance


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A short directory every target user can write to (the target is this machine)."""
    path = Path(tempfile.mkdtemp(prefix="rogt-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    """A unique ``LIBTMUX_SOCKET``; its tmux server is killed (``tmux -L <socket> kill-server``) after."""
    with libtmux.tmux_socket("pytest-tmux") as name:
        yield name


@pytest.fixture
async def libtmux_url(tmux_socket: str) -> AsyncIterator[str]:
    """libtmux-mcp over streamable HTTP (``fastmcp run``) on ``tmux_socket``, ready; stopped afterwards."""
    async with libtmux.libtmux_http(tmux_socket) as url:
        yield url
