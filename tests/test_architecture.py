"""The package boundaries: import direction (own packages and the MCP SDK) and the directions inside them,
the one home of each HTTP client, declared dependencies against real imports, what serving imports at
start-up, the sshd marker, each package's public surface (golden files in tests/public_api/) and the module
list in each sub-package's docstring."""

from __future__ import annotations

import ast
import difflib
import enum
import functools
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pydantic
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


@functools.cache
def _tree(path: Path) -> ast.Module:
    """One parse per file for the whole module (the checks only read the trees)."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _walk(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_tree(path)))


def _import_nodes(path: Path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(absolute module, names taken from it) for every import, also those inside functions (lazy ones)."""
    for node in _walk(path):
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


# ------------------------------------------------------------------------------------------ directions inside
# Within upstream no module imports another that imports it back, however lazily (a TYPE_CHECKING import
# counts: it is still a dependency); in the gateway only gateway/cli.py and gateway/serving/ import serving
# (the sub-packages under it are what serving serves); and no product module imports the harness.

SERVING_IMPORTERS = ("gateway/cli.py", "gateway/serving/")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _internal_graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports (any import, anywhere in the file)."""
    modules = {_module_name(path): path for path in _sources(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module, names in _import_nodes(path):
            for candidate in (module, *(f"{module}.{n}" for n in names)):
                if candidate in modules and candidate != name:
                    targets.add(candidate)
        graph[name] = targets
    return graph


def test_no_upstream_module_imports_one_that_imports_it_back() -> None:
    graph = _internal_graph("upstream")
    assert "upstream._upstream" in graph["upstream"]  # the graph sees the package's own imports
    assert _cycles(graph) == []  # (the cycle finder is shown to find cycles further below)


def test_only_the_cli_and_serving_itself_import_gateway_serving() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _sources("gateway")
        if not str(path.relative_to(ROOT)).startswith(SERVING_IMPORTERS)
        for module, names in _import_nodes(path)
        if module == "gateway.serving"
        or module.startswith("gateway.serving.")
        or (module == "gateway" and "serving" in names)
    ]
    assert offenders == []


def test_the_serving_importers_named_above_exist() -> None:
    # A renamed cli or serving package would make the check above pass without guarding anything.
    assert (ROOT / "gateway" / "cli.py").is_file()
    assert (ROOT / "gateway" / "serving" / "__init__.py").is_file()
    assert any(
        module.startswith("gateway.serving") for module, _ in _import_nodes(ROOT / "gateway" / "cli.py")
    )


# What the gateway may import of its two dependencies: their public surface, and the demo target (kept out
# of ``import remoteops`` on purpose, imported explicitly where the demo starts).
REACHABLE = {"upstream", "remoteops", "remoteops.embedded"}


def test_the_gateway_reaches_upstream_and_remoteops_only_through_their_public_surface() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _sources("gateway")
        for module, _ in _import_nodes(path)
        if module.split(".")[0] in {"upstream", "remoteops"} and module not in REACHABLE
    ]
    assert offenders == []


def _imported_by_name(path: Path) -> Iterator[str]:
    """Modules named by a constant in ``importlib.import_module("…")`` (the imports ``ast`` cannot see)."""
    for node in _walk(path):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


@pytest.mark.parametrize("package", OWN)
def test_the_product_never_imports_its_harness(package: str) -> None:
    harness = {"acceptance", "tests"}
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _sources(package)
        for module in (*(m for m, _ in _import_nodes(path)), *_imported_by_name(path))
        if module.split(".")[0] in harness
    ]
    assert offenders == []


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


@functools.cache  # the installed metadata is read once for the two tests (seconds on a loaded machine)
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
    return {n.value for n in _walk(path) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.xdist_group("installed-metadata")  # one read of it (see above)
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


@pytest.mark.xdist_group("installed-metadata")  # one read of it (see above)
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


# ------------------------------------------------------------------------------------------ public surface

# Each package's ``__all__``, pinned by a file a reviewer reads in the diff: tests/public_api/<package>.txt,
# one exported name a line with its kind, sorted. After a deliberate change of the surface, regenerate and
# review:
#     ROG_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/test_architecture.py -k public_surface
GOLDEN = ROOT / "tests" / "public_api"
UPDATE_GOLDEN = "ROG_UPDATE_GOLDEN"
_GOLDEN_HEADER = (
    "# The public surface of `{package}`: its __all__, one name a line with its kind, sorted.\n"
    "# Pinned by tests/test_architecture.py. After a deliberate change, regenerate and review the diff:\n"
    "#     ROG_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/test_architecture.py -k public_surface\n"
)


def _kind(value: object) -> str:
    if isinstance(value, type):
        if issubclass(value, BaseException):
            return "exception"
        if issubclass(value, enum.Enum):
            return "enum"
        if getattr(value, "_is_protocol", False):
            return "protocol"
        if issubclass(value, pydantic.BaseModel):
            return "model"
        return "class"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return "function"
    if isinstance(value, types.UnionType | types.GenericAlias) or (type(value).__module__ == "typing"):
        return "type"  # an alias: Literal[...], Callable[...], X | Y
    return "constant"


def _surface(package: str) -> list[str]:
    module = importlib.import_module(package)
    names = sorted(module.__all__, key=lambda name: (name.casefold(), name))
    return [f"{name}  # {_kind(getattr(module, name))}" for name in names]


def _golden(package: str) -> list[str]:
    text = (GOLDEN / f"{package}.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("package", OWN)
def test_each_package_public_surface_matches_its_golden_file(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == [], f"in {package}.__all__ but missing from the package"
    actual = _surface(package)
    if os.environ.get(UPDATE_GOLDEN) == "1":
        header = _GOLDEN_HEADER.format(package=package)
        (GOLDEN / f"{package}.txt").write_text(header + "\n".join(actual) + "\n", encoding="utf-8")
        pytest.skip(f"{UPDATE_GOLDEN}=1: tests/public_api/{package}.txt rewritten; review its diff")
    expected = _golden(package)
    diff = "\n".join(
        difflib.unified_diff(expected, actual, f"tests/public_api/{package}.txt", "__all__", lineterm="")
    )
    assert actual == expected, (
        f"the public surface of {package} changed; if deliberate, regenerate with "
        f"{UPDATE_GOLDEN}=1 (see the comment above GOLDEN) and review:\n{diff}"
    )


def test_every_golden_file_belongs_to_a_package() -> None:
    # A renamed package would leave its golden file behind, pinning nothing.
    assert sorted(path.stem for path in GOLDEN.glob("*.txt")) == sorted(OWN)


def _sub_packages() -> Iterator[Path]:
    for package in ("remoteops", "gateway"):
        for init in sorted((ROOT / package).rglob("__init__.py")):
            if init.parent != ROOT / package:
                yield init.parent


_LISTED = re.compile(r"^- ``(\w+)`` — \S", re.MULTILINE)


@pytest.mark.parametrize("folder", list(_sub_packages()), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_sub_package_docstring_lists_exactly_its_modules(folder: Path) -> None:
    # One line each (``- ``name`` — what it is``), so ``help(remoteops.ssh)`` is the map of the folder.
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    listed = _LISTED.findall(docstring)
    present = sorted(
        path.stem if path.is_file() else path.name
        for path in folder.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    )
    assert len(listed) == len(set(listed)), f"a module is listed twice: {listed}"
    assert {
        "not listed": sorted(set(present) - set(listed)),
        "listed, not there": sorted(set(listed) - set(present)),
    } == {"not listed": [], "listed, not there": []}


def test_the_architecture_docs_name_every_sub_package() -> None:
    # The README's architecture section and docs/architecture.md: one line per sub-package, none missing.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Architecture") :]
    section = section[: section.index("\n## ", 1)]
    docs = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    top_level = sorted({folder.relative_to(ROOT).parts[1] for folder in _sub_packages()})
    assert top_level  # the walk found the sub-packages
    for text, where in ((section, "README.md#architecture"), (docs, "docs/architecture.md")):
        unnamed = [name for name in top_level if f"- `{name}/` — " not in text]
        assert unnamed == [], f"{where} does not describe these sub-packages"


# ------------------------------------------------------------------------------------------ remoteops layers
# Inside remoteops: a core (the root modules but the facade, plus ssh, agent and privilege) that never
# imports a capability; capability packages that depend on the core only (never on each other, never on the
# facade: they are given the narrow protocols of ``remoteops._runner``); the embedded demo target on the core
# only; and the facade (``remoteops._ops``, the package's ``__init__``), the only importers of capabilities.

CORE_PACKAGES = ("ssh", "agent", "privilege")
CORE_PUBLIC_MODULES = ("requests",)  # root modules of the core without the underscore: public by name
CAPABILITY_PACKAGES = ("files", "tasks", "sessions", "transfers", "forwards", "system", "systemd", "fleet")
FACADE_MODULES = ("remoteops", "remoteops._ops")
# Imports of remoteops modules inside functions (run when called, outside the module graph below), each with
# the reason it is lazy. Anything else is imported at module level, where the cycle check sees it.
LAZY_REMOTEOPS_IMPORTS: dict[tuple[str, str], str] = {}


def _remoteops_modules() -> dict[str, Path]:
    out = {}
    for path in _sources("remoteops"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _layer(module: str) -> str:
    """core | facade | embedded | capability:<name> for a module of remoteops."""
    parts = module.split(".")
    if module in FACADE_MODULES:
        return "facade"
    head = parts[1]
    if head in CAPABILITY_PACKAGES:
        return f"capability:{head}"
    if head == "embedded":
        return "embedded"
    if head in CORE_PACKAGES or head in CORE_PUBLIC_MODULES or head.startswith("_"):
        return "core"
    raise AssertionError(f"{module}: a remoteops module outside every layer (add it to one)")


def _resolved(module: str, names: tuple[str, ...], known: dict[str, Path]) -> set[str]:
    """The remoteops modules an import statement loads (``from remoteops.agent import program`` → the
    submodule when it is one, else the package)."""
    out = set()
    for name in names or ("",):
        sub = f"{module}.{name}" if name else module
        out.add(sub if sub in known else module)
    return out


def _remoteops_edges(*, lazy: bool) -> set[tuple[str, str]]:
    """(importer, imported) between remoteops modules: module-level imports (also those under
    ``if TYPE_CHECKING:``), or with ``lazy`` only the imports inside functions."""
    known = _remoteops_modules()
    edges = set()
    for importer, path in known.items():
        inside = {
            id(node)
            for fn in _walk(path)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn)
        }
        for node in _walk(path):
            if (id(node) in inside) != lazy:
                continue
            if isinstance(node, ast.Import):
                targets = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = _resolved(node.module, tuple(a.name for a in node.names), known)
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "remoteops" and target != importer:
                    assert target in known, f"{importer} imports {target}, which is not a remoteops module"
                    edges.add((importer, target))
    return edges


def test_every_remoteops_module_belongs_to_a_layer() -> None:
    layers = {module: _layer(module) for module in _remoteops_modules()}
    assert layers["remoteops._ops"] == "facade"
    assert layers["remoteops._runner"] == "core"
    assert set(layers.values()) >= {"core", "facade", "embedded"} | {
        f"capability:{name}" for name in CAPABILITY_PACKAGES
    }


def _allowed(importer_layer: str, imported_layer: str) -> bool:
    if importer_layer == "facade":
        return True
    if imported_layer == "core":
        return True
    # a capability or the embedded target uses its own modules; the core never reaches up
    return importer_layer == imported_layer and importer_layer != "core"


def test_remoteops_layers_import_only_downwards() -> None:
    offenders = sorted(
        f"{importer} ({_layer(importer)}) imports {imported} ({_layer(imported)})"
        for importer, imported in _remoteops_edges(lazy=False) | _remoteops_edges(lazy=True)
        if not _allowed(_layer(importer), _layer(imported))
    )
    assert offenders == []


def test_only_the_facade_imports_capabilities_and_only_the_package_imports_the_facade() -> None:
    edges = _remoteops_edges(lazy=False) | _remoteops_edges(lazy=True)
    capability_importers = {
        importer
        for importer, imported in edges
        if _layer(imported).startswith("capability:") and _layer(importer) != _layer(imported)
    }
    assert capability_importers <= set(FACADE_MODULES)
    assert {importer for importer, imported in edges if imported == "remoteops._ops"} == {"remoteops"}


def test_the_layer_check_sees_a_capability_reaching_for_the_facade_or_a_sibling() -> None:
    # The rule itself, so a broken _allowed cannot pass the checks above vacuously.
    assert not _allowed("capability:sessions", "capability:tasks")
    assert not _allowed("capability:files", "facade")
    assert not _allowed("core", "capability:files")
    assert not _allowed("embedded", "capability:files")
    assert _allowed("capability:tasks", "core")
    assert _allowed("capability:tasks", "capability:tasks")
    assert _allowed("facade", "capability:tasks")


# ------------------------------------------------------------------------------------------ import cycles
# Among the gateway's own modules, the imports a module makes at its top level (``if TYPE_CHECKING:`` blocks
# included: a cycle of types is a cycle of concepts) form no cycle. Imports inside functions are not
# counted; a package's ``__init__`` is not an edge from its submodules.


def _top_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from _top_level_imports(node.body)
            yield from _top_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _top_level_imports(block)


def _module_graph(package: str) -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in _sources(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in _top_level_imports(_tree(path).body):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif node.module and node.level == 0:
                for alias in node.names:  # ``from gateway.tools import files`` imports the submodule
                    sub = f"{node.module}.{alias.name}"
                    edges.add(sub if sub in modules else node.module)
        graph[name] = {edge for edge in edges if edge in modules and edge != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_gateway_modules_import_each_other_without_a_cycle() -> None:
    graph = _module_graph("gateway")
    assert {"gateway._catalog", "gateway._context", "gateway._runtime"} <= graph.keys()
    assert _cycles(graph) == []


def _edge_graph(edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    return graph


def test_no_import_cycles_between_remoteops_modules() -> None:
    # remoteops/__init__ imports everything and is imported (as the parent package) by everything: it is
    # left out, as Python initialises a parent package before its modules.
    edges = {(a, b) for a, b in _remoteops_edges(lazy=False) if "remoteops" not in (a, b)}
    assert _cycles(_edge_graph(edges)) == []


def test_lazy_remoteops_imports_are_only_those_listed_with_a_reason() -> None:
    assert _remoteops_edges(lazy=True) == set(LAZY_REMOTEOPS_IMPORTS)
    assert all(reason.strip() for reason in LAZY_REMOTEOPS_IMPORTS.values())
