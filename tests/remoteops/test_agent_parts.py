"""The agent program is written in parts and sent as one text: the join is well defined, the parts share
one namespace without clashes, only the standard library is used, and nothing needs Python > 3.8."""

from __future__ import annotations

import ast
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remoteops.agent import boot
from remoteops.agent import program as proto

PARTS_DIR = Path(proto.__file__).parent


def _vermin() -> str:
    found = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    assert found, "vermin is in the dev extra: pip install -e '.[dev]'"
    return found


def _vermin_run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_vermin(), "--no-config-file", "-t=3.8-", "--no-tips", "--violations", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _sources() -> list[tuple[str, bytes]]:
    return [(name, (PARTS_DIR / f"{name}.py").read_bytes()) for name in proto.PARTS]


def test_the_joined_program_needs_nothing_newer_than_python_3_8(tmp_path: Path) -> None:
    program = tmp_path / "rog_agent.py"
    program.write_bytes(proto.agent_source()[0])
    run = _vermin_run(program)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "not met" not in run.stdout


def test_the_python_check_fails_on_a_3_9_construct(tmp_path: Path) -> None:
    newer = b'"""A part."""\n\nNAME = "rog-x".removeprefix("rog-")\n'
    program = tmp_path / "rog_agent.py"
    program.write_bytes(proto.join_parts([*_sources(), ("newer", newer)]))
    run = _vermin_run(program)
    assert run.returncode != 0
    assert "removeprefix" in run.stdout


def test_what_is_sent_is_the_parts_joined_in_order_and_its_digest_covers_every_byte() -> None:
    program, digest = proto.agent_source()
    assert boot.agent_source() == (program, digest)
    assert program == proto.join_parts(_sources())
    assert hashlib.sha256(program).hexdigest() == digest
    tree = ast.parse(program)
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert [node.level for node in imports if node.level] == []  # no part imports another
    futures = [node for node in imports if node.module == "__future__"]
    assert len(futures) == 1
    assert tree.body[1] is futures[0]  # right after the docstring: the first statement
    positions = [program.index(f"# {'-' * 40} part: {name}\n".encode()) for name in proto.PARTS[1:]]
    assert positions == sorted(positions)


def test_the_parts_share_one_namespace_without_a_clash() -> None:
    owners: dict[str, list[str]] = {}
    for name, source in _sources():
        for node in ast.parse(source).body:
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for defined in names:
                if defined != "__all__":
                    owners.setdefault(defined, []).append(name)
    assert {defined: parts for defined, parts in owners.items() if len(parts) > 1} == {}


def test_the_program_uses_only_the_standard_library_and_each_part_stays_small() -> None:
    program, _ = proto.agent_source()
    modules = set()
    for node in ast.walk(ast.parse(program)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    assert modules - set(sys.stdlib_module_names) == set()
    sizes = {name: source.count(b"\n") for name, source in _sources()}
    assert {name: lines for name, lines in sizes.items() if lines > 420} == {}


def test_an_import_of_a_part_inside_a_block_is_refused_by_the_join() -> None:
    nested = b'"""A part."""\n\nif True:\n    from .codec import encode\n'
    with pytest.raises(ValueError, match="top level"):
        proto.join_parts([*_sources(), ("nested", nested)])
