"""`upstream` knows nothing of `gateway` or `remoteops`, and httpx2 stays in its transport module."""

from __future__ import annotations

import ast
from pathlib import Path

import upstream

PACKAGE = Path(upstream.__file__).parent


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_upstream_never_imports_gateway_or_remoteops() -> None:
    for path in PACKAGE.glob("*.py"):
        assert not imported_roots(path) & {"gateway", "remoteops"}, path.name


def test_httpx2_is_confined_to_the_transport_module() -> None:
    users = {path.name for path in PACKAGE.glob("*.py") if "httpx2" in imported_roots(path)}
    assert users == {"_transport.py"}


def test_public_names_are_exactly_the_declared_all() -> None:
    assert sorted(upstream.__all__) == upstream.__all__
    for name in upstream.__all__:
        assert hasattr(upstream, name)
