"""The kinds cache (tests/fixtures/tier_cache.py): kept while no source changes, dropped when one does."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fixtures.tier_cache import KindsCache


def _project(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "gateway").mkdir()
    (root / "pyproject.toml").write_text("[project]\n")
    (root / "tests" / "test_a.py").write_text("def test_a(): pass\n")
    (root / "gateway" / "mod.py").write_text("X = 1\n")
    return root


def test_kinds_put_and_saved_are_read_back_by_the_next_run(tmp_path: Path) -> None:
    root = _project(tmp_path)
    first = KindsCache(root)
    assert first.get("tests/test_a.py::test_a") is None
    first.put("tests/test_a.py::test_a", frozenset({"sshd", "process"}))
    first.save()
    again = KindsCache(root)
    assert again.get("tests/test_a.py::test_a") == frozenset({"sshd", "process"})
    assert again.get("tests/test_a.py::test_b") is None
    assert [p.suffix for p in (root / ".cache" / "tiers").iterdir()] == [".json"]  # no temporary file left


def test_an_edit_to_any_source_file_makes_a_new_key_and_the_old_file_goes(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cache = KindsCache(root)
    cache.put("tests/test_a.py::test_a", frozenset({"component"}))
    cache.save()
    old = sorted((root / ".cache" / "tiers").glob("*.json"))
    product = root / "gateway" / "mod.py"
    product.write_text("X = 22\n")  # another size
    os.utime(product, ns=(1, 1))
    edited = KindsCache(root)
    assert edited.get("tests/test_a.py::test_a") is None
    edited.put("tests/test_a.py::test_a", frozenset())
    edited.save()
    now = sorted((root / ".cache" / "tiers").glob("*.json"))
    assert len(old) == len(now) == 1
    assert old != now
    assert KindsCache(root).get("tests/test_a.py::test_a") == frozenset()


def test_only_the_projects_own_tests_are_covered_and_a_torn_file_is_no_entry(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cache = KindsCache(root)
    assert cache.covers(root / "tests" / "test_a.py")
    assert not cache.covers(tmp_path.parent / "scratch" / "test_scratch.py")
    cache.put("tests/test_a.py::test_a", frozenset({"sshd"}))
    cache.save()
    (path,) = (root / ".cache" / "tiers").glob("*.json")
    path.write_text('{"tests/test_a.py::test_a": ["ss')
    assert KindsCache(root).get("tests/test_a.py::test_a") is None
