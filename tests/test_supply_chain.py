"""The supply-chain files are in step with what is installed: ops/constraints.txt pins exactly the runtime
dependency closure of the project (what a plain ``pip install .`` brings), at the versions installed here (the
venv is made with it); ops/THIRD_PARTY_LICENSES.md lists every pinned package at its pinned version. The
license texts themselves are compared with pip-licenses' report by ops/checks.sh; the documentation site's
link rewriting (ops/mkdocs_hooks.py) is checked here on its own."""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "ops" / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def _runtime_closure() -> dict[str, str]:
    """Every distribution a plain install of the project needs (no extras), with its installed version."""
    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in metadata.requires("remoteops-gateway") or []]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        dist = metadata.distribution(req.name)
        seen[name] = dist.version
        todo.extend(Requirement(r) for r in dist.requires or [])
    return seen


def test_the_constraints_pin_exactly_the_runtime_dependency_closure_at_the_installed_versions() -> None:
    assert _pins() == _runtime_closure(), "regenerate with ./ops/checks.sh --update"


def test_the_license_inventory_lists_every_pinned_package_at_its_pinned_version() -> None:
    text = (ROOT / "ops" / "THIRD_PARTY_LICENSES.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\S+) +\| (\S+) +\| ([^|]*?) +\|", text, re.MULTILINE)
    listed = {canonicalize_name(name): version for name, version, _ in rows if name not in {"Name"}}
    assert listed == _pins()
    assert all(license_ and license_ != "UNKNOWN" for _, _, license_ in rows), "a package without a license"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "ops" / "mkdocs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_turns_repository_links_into_page_links_and_other_files_into_paths() -> None:
    rewrite = _hooks().rewrite_links
    readme = "[Configuration](docs/configuration.md) [log](CHANGELOG.md#010) [ex](ops/gateway.example.toml)"
    assert rewrite(readme, "index.md") == (
        "[Configuration](configuration.md) [log](changelog.md#010) ex (`ops/gateway.example.toml`)"
    )
    page = "[runbook](../ops/RUNBOOK.md) [`acceptance/README.md`](../acceptance/README.md) [e](errors.md#x)"
    assert rewrite(page, "operations.md") == (
        "[runbook](runbook.md) [`acceptance/README.md`](acceptance.md) [e](errors.md#x)"
    )
    code = "```sh\n[not](a/link.md)\n```\n[unit](remoteops-gateway.service)"
    expected = "```sh\n[not](a/link.md)\n```\nunit (`ops/remoteops-gateway.service`)"
    assert rewrite(code, "runbook.md") == expected


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def test_every_documentation_page_is_in_the_site_navigation_once() -> None:
    import yaml  # type: ignore[import-untyped]  # comes with mkdocs (the dev extra), without stubs

    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} | set(_hooks().EXTRA_PAGES.values())
    assert sorted(nav) == sorted(pages), "add the page to mkdocs.yml's nav"
