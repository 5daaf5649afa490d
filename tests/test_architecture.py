"""The package boundaries: import direction (own packages and the MCP SDK), the one home of each HTTP
client, declared dependencies against real imports, what serving imports at start-up, the sshd marker,
and each package's public surface."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OWN = ("gateway", "upstream", "remoteops")
SDK = ("mcp", "mcp_types")
ALLOWED = {
    # The composition root and the only MCP server: everything.
    "gateway": {"gateway", "upstream", "remoteops", "mcp", "mcp_types"},
    # An MCP *client*: the SDK's client side and the protocol types (checked further below), nothing of ours.
    "upstream": {"upstream", "mcp", "mcp_types"},
    # Knows nothing of MCP.
    "remoteops": {"remoteops"},
}


def _sources(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))


def _import_nodes(path: Path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(absolute module, names taken from it) for every import, also those inside functions (lazy ones)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, tuple(alias.name for alias in node.names)


def _imports(path: Path) -> set[str]:
    return {module.split(".")[0] for module, _ in _import_nodes(path)}


def _importers(top: str) -> set[str]:
    """Modules of the three packages that import ``top`` (or a submodule of it)."""
    return {
        str(path.relative_to(ROOT)) for package in OWN for path in _sources(package) if top in _imports(path)
    }


@pytest.mark.parametrize("package", OWN)
def test_imports_only_go_in_the_allowed_direction(package: str) -> None:
    guarded = {*OWN, *SDK}
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _sources(package)
        for name in sorted(_imports(path) & guarded)
        if name not in ALLOWED[package]
    ]
    assert offenders == []


def _defining_module(module: str, names: tuple[str, ...]) -> Iterator[str]:
    """Where what an import statement takes really lives (``from mcp import Client`` → ``mcp.client…``)."""
    if not names:
        yield module
        return
    imported = importlib.import_module(module)
    for name in names:
        value = getattr(imported, name)
        yield getattr(value, "__module__", None) or f"{module}.{name}"


def test_upstream_uses_only_the_client_side_of_the_sdk() -> None:
    offenders = []
    for path in _sources("upstream"):
        for module, names in _import_nodes(path):
            if module.split(".")[0] != "mcp":
                continue
            for where in _defining_module(module, names):
                if where.startswith("mcp.server"):
                    offenders.append(f"{path.relative_to(ROOT)}: {module} {names} lives in {where}")
    assert offenders == []


def test_the_sdks_http_client_lives_in_the_one_module_that_builds_the_upstream_transport() -> None:
    # The SDK's streamable-HTTP transport needs httpx2 (pydantic's fork); its exceptions are not httpx's.
    assert _importers("httpx2") == {"upstream/_transport.py"}


def test_the_projects_own_outbound_http_uses_httpx_in_the_gateway_only() -> None:
    users = _importers("httpx")
    assert users  # the watchdog self-probe
    assert all(path.startswith("gateway/") for path in users), users


# ------------------------------------------------------------------------------------------ dependencies

# Declared distributions no module imports by name, and the code that uses them all the same.
USED_BY_NAME = {
    "httptools": (
        "gateway/serving/serve.py",
        "httptools",
    ),  # uvicorn's C parser, chosen with http="httptools"
}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    out = set()
    for requirement in project["dependencies"]:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        assert match is not None, requirement
        out.add(_normalize(match.group(0)))
    return out


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party module → the distributions that provide it (from the installed metadata)."""
    provided = importlib.metadata.packages_distributions()
    tops = {name for package in OWN for path in _sources(package) for name in _imports(path)}
    return {
        top: {_normalize(dist) for dist in provided.get(top, [])}
        for top in sorted(tops)
        if top not in sys.stdlib_module_names and top not in OWN and top != "__future__"
    }


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_every_declared_dependency_is_used_by_the_code() -> None:
    imported = set().union(*_third_party_imports().values())
    unused = []
    for dist in sorted(_declared()):
        if dist in USED_BY_NAME:
            where, literal = USED_BY_NAME[dist]
            if literal not in _string_constants(ROOT / where):
                unused.append(f"{dist} (no longer named in {where})")
        elif dist not in imported:
            unused.append(dist)
    assert unused == []


def test_every_imported_third_party_package_is_a_declared_dependency() -> None:
    declared = _declared()
    undeclared = {top: dists for top, dists in _third_party_imports().items() if not dists & declared}
    assert undeclared == {}


# ------------------------------------------------------------------------------------------ start-up

# What serving must not pay for at start-up and at idle (stdio clients spawn the gateway once per session;
# every module loaded stays in its RSS): the embedded demo target's SSH stack, the watchdog's HTTP client
# and PyJWT (OAuth only) are imported when used. (The SDK itself loads cryptography, for its request-state
# codecs.)
NOT_FOR_SERVING = {"asyncssh", "httpx", "jwt"}
# Our own modules that only one optional feature uses, imported where that feature starts: OAuth access
# tokens (gateway.serving.http), audit shipping and its spool (gateway._runtime), the embedded demo target.
OWN_NOT_FOR_SERVING = {
    "gateway.auth.oauth",
    "gateway.audit.ship",
    "gateway.audit.spool",
    "remoteops.embedded",
    "remoteops.embedded.target",
    "remoteops.embedded.session",
}
_LOADED = "import json, sys\nprint(json.dumps(sorted(sys.modules)))"


@pytest.mark.slow  # an interpreter start-up
def test_serving_imports_neither_the_demo_ssh_stack_nor_the_http_client_nor_optional_features() -> None:
    statement = "import gateway.cli, gateway.serving.serve, gateway._runtime, gateway.tools"
    proc = subprocess.run(
        [sys.executable, "-c", f"{statement}\n{_LOADED}"],
        capture_output=True,
        check=True,
        timeout=60,
        cwd=ROOT,
        text=True,
    )
    modules = set(json.loads(proc.stdout))
    packages = {name.split(".")[0] for name in modules}
    assert "gateway.serving.serve" in modules
    assert packages & NOT_FOR_SERVING == set()
    assert modules & OWN_NOT_FOR_SERVING == set()


def test_the_modules_kept_out_of_serving_exist() -> None:
    # A renamed module would make the start-up pin above pass without guarding anything.
    for name in OWN_NOT_FOR_SERVING:
        path = ROOT / name.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), name


# ------------------------------------------------------------------------------ test tiers and harness
# The suite's tiers (tests/fixtures/tiers.py, applied by tests/conftest.py) follow what each test reaches;
# these checks keep a process-starting helper from slipping past them, and keep acceptance → product and
# tests → acceptance the only arrows (acceptance/harness holds what both use).

HARNESS_MODULES = ("acceptance/harness", "tests/fixtures")


def _harness_module_names() -> list[str]:
    names = []
    for folder in HARNESS_MODULES:
        for path in sorted((ROOT / folder).glob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            names.append(module.removesuffix(".__init__"))
    return [*names, "tests.conftest", *(f"tests.{p}.conftest" for p in ("gateway", "remoteops", "upstream"))]


def test_acceptance_never_imports_the_tests() -> None:
    offenders = sorted(
        f"{path.relative_to(ROOT)}: {module}"
        for path in (ROOT / "acceptance").rglob("*.py")
        for module, _ in _import_nodes(path)
        if module == "tests" or module.startswith("tests.")
    )
    assert offenders == []


def test_every_helper_that_starts_a_process_says_what_it_starts() -> None:
    # A public helper of the harness or the fixtures that reaches a spawning primitive (subprocess, anyio,
    # asyncio) must carry acceptance.harness.starts(kind): that tag is what puts its users in their tier.
    from acceptance.harness import STARTS_ATTR
    from tests.fixtures.tiers import PROCESS, kinds_reached

    untagged = []
    for name in _harness_module_names():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or hasattr(obj, STARTS_ATTR):
                continue
            if PROCESS in kinds_reached([obj]):
                untagged.append(f"{name}.{attr}")
    assert untagged == []


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    tiers = ("unit", "component", "system")
    wrong = [
        item.nodeid
        for item in request.session.items
        if sum(item.get_closest_marker(t) is not None for t in tiers) != 1
        or (item.get_closest_marker("sshd") is not None and item.get_closest_marker("system") is None)
        or (item.get_closest_marker("system") is not None) != (item.get_closest_marker("slow") is not None)
    ]
    assert wrong == []


_SCRATCH_INI = "[pytest]\nmarkers =\n" + "".join(
    f"    {m}: {m}\n" for m in ("unit", "component", "system", "sshd", "slow")
)
_SCRATCH_CONFTEST = """
import subprocess
import pytest
from tests.conftest import pytest_collection_modifyitems  # noqa: F401 - the hook under test
from tests.fixtures.sshd import start_sshd

@pytest.fixture
def sshd():
    return start_sshd  # referenced, never started: tiers come from what is reached, not from what ran

@pytest.fixture
def target(sshd):
    return sshd
"""

_SCRATCH_TESTS = """
import subprocess
import pytest
from remoteops.embedded import EmbeddedTarget
from tests.fixtures import libtmux
from tests.fixtures.gateway_proc import run_gateway as start_gateway
from tests.upstream.conftest import FaultServer

def _helper():
    return start_gateway

def test_direct(sshd):
    pass

def test_through_another_fixture(target):
    pass

def test_a_context_manager_in_the_body():
    assert libtmux.tmux_socket

def test_through_a_module_helper_under_another_name():
    assert _helper()

def test_a_fault_upstream():
    assert FaultServer

def test_the_embedded_target():
    assert EmbeddedTarget

def test_a_bare_process():
    assert subprocess.run

@pytest.mark.unit
def test_a_bare_process_stated_unit():
    assert subprocess.run

def test_plain_code():
    pass
"""


@pytest.mark.system  # four in-process pytest sessions
def test_tiers_follow_fixtures_context_managers_and_helpers_a_test_reaches(pytester: pytest.Pytester) -> None:
    # The hook under test is the suite's own (tests/conftest.py); nothing is started: collection only.
    pytester.makeini(_SCRATCH_INI)
    pytester.makeconftest(_SCRATCH_CONFTEST)
    pytester.makepyfile(test_scratch=_SCRATCH_TESTS)

    def selected(expression: str) -> set[str]:
        result = pytester.runpytest("--collect-only", "-q", "-m", expression)
        return {line.split("::")[1] for line in result.outlines if "::" in line}

    system = {
        "test_direct",
        "test_through_another_fixture",
        "test_a_context_manager_in_the_body",
        "test_through_a_module_helper_under_another_name",
        "test_a_bare_process",
    }
    assert selected("system") == system
    assert selected("sshd") == {"test_direct", "test_through_another_fixture"}
    assert selected("component") == {"test_a_fault_upstream", "test_the_embedded_target"}
    assert (
        selected("not sshd and not slow")
        == selected("not system")
        == {
            "test_a_fault_upstream",
            "test_the_embedded_target",
            "test_a_bare_process_stated_unit",
            "test_plain_code",
        }
    )


@pytest.mark.system  # an in-process pytest session
def test_a_test_stated_below_a_helper_it_reaches_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nmarkers =\n    unit: u\n    component: c\n    system: s\n    sshd: s\n    slow: s\n"
    )
    pytester.makeconftest(_SCRATCH_CONFTEST)
    pytester.makepyfile("import pytest\n\n@pytest.mark.unit\ndef test_claims_unit(sshd):\n    pass\n")
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


PUBLIC = {
    "gateway": {"main"},
    "upstream": {
        "Backoff",
        "ElicitCallback",
        "ProgressCallback",
        "SecretCallback",
        "StderrCallback",
        "StderrLine",
        "SurfaceCallback",
        "SurfaceKind",
        "SurfaceNotice",
        "ToolsChangedCallback",
        "Upstream",
        "UpstreamAmbiguous",
        "UpstreamCallTimeout",
        "UpstreamClosed",
        "UpstreamError",
        "UpstreamHealth",
        "UpstreamProtocolError",
        "UpstreamRejected",
        "UpstreamSessionLost",
        "UpstreamSettings",
        "UpstreamState",
        "UpstreamSurface",
        "UpstreamUnavailable",
    },
    "remoteops": {
        "CAPABILITY_TOOLS",
        "AuthError",
        "CancelStep",
        "Capabilities",
        "Carrier",
        "CarrierMode",
        "CarrierState",
        "Collection",
        "CommandTimeout",
        "ConnectError",
        "ConnectReason",
        "DeleteResult",
        "DiagnoseReport",
        "DiskUsage",
        "ExecRequest",
        "ExecResult",
        "FileAccessDenied",
        "FileConflict",
        "FileContent",
        "FileInfo",
        "FileKind",
        "FileNotFound",
        "FileRequestInvalid",
        "GrepMatch",
        "GrepResult",
        "GrepSkipped",
        "ForwardCheck",
        "ForwardClosed",
        "ForwardConflict",
        "ForwardCreated",
        "ForwardError",
        "ForwardHealth",
        "ForwardKind",
        "ForwardManager",
        "ForwardNotFound",
        "ForwardSettings",
        "ForwardSpec",
        "ForwardStartFailed",
        "ForwardView",
        "HostKeyError",
        "HostKeyPolicy",
        "Hunk",
        "HunkResult",
        "InvalidRequest",
        "ListError",
        "ListResult",
        "MissingCapability",
        "MkdirResult",
        "MoveResult",
        "MultiplexMode",
        "MultiplexState",
        "PatchResult",
        "PathArg",
        "PolicyDenied",
        "ProbeError",
        "ProtectedPath",
        "RawExec",
        "RawStream",
        "RemoteFileError",
        "RemoteFiles",
        "RemoteOps",
        "RemoteOpsError",
        "RemoteShellError",
        "RemoteSessions",
        "RemoteTasks",
        "RenderedCommand",
        "SectionError",
        "KeyName",
        "SendMode",
        "SessionCapabilityMissing",
        "SessionCloseResult",
        "SessionConflict",
        "SessionEnsureResult",
        "SessionError",
        "SessionExited",
        "SessionHealth",
        "SessionInfo",
        "SessionNotFound",
        "SessionRead",
        "SessionRemoteError",
        "SessionSendResult",
        "SessionSettings",
        "SessionState",
        "SessionView",
        "SessionWaitOutcome",
        "SessionWaitResult",
        "StateForwardStore",
        "StateProblem",
        "StateStore",
        "TargetIdentity",
        "TargetInfo",
        "TargetSpec",
        "TaskCancelResult",
        "TaskCapabilityMissing",
        "TaskConflict",
        "TaskError",
        "TaskHealth",
        "TaskInfo",
        "TaskMode",
        "TaskNotFound",
        "TaskOutput",
        "TaskRemoteError",
        "TaskSettings",
        "TaskState",
        "TaskStream",
        "TaskWaitResult",
        "TransportError",
        "TransportLost",
        "TransportSettings",
        "TransportStats",
        "UnknownTarget",
        "UnresolvedHost",
        "WaitOutcome",
        "atomic_write",
        "WriteResult",
        "render_command",
        # transfers (remoteops.transfers.manager*)
        "ChecksumMismatch",
        "DestinationExists",
        "FreeSpaceFloor",
        "ItemChange",
        "Leftover",
        "LocalPathDenied",
        "PathNotFound",
        "SyncOptions",
        "SyncResult",
        "TransferCapabilityMissing",
        "TransferFailed",
        "TransferHooks",
        "TransferOptions",
        "TransferPathError",
        "TransferResult",
        "TransferSettings",
        "Transfers",
        # privilege (issue 16): the choice point, its report, its errors and the secret source it asks
        "PrivilegeError",
        "PrivilegeMode",
        "PrivilegeReason",
        "PrivilegeReport",
        "PrivilegeSettings",
        "ProviderAttempt",
        "ProviderName",
        "SecretRequest",
        "SecretRequired",
        "SecretSource",
        "permission_denial",
        "supervised_child",  # the gateway's askpass command runs as a supervised child too
    },
}


@pytest.mark.parametrize("package", OWN)
def test_each_package_public_surface_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"
    assert set(exported) == PUBLIC[package], (
        "a change of the public surface must be deliberate: update PUBLIC"
    )
