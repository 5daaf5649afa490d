"""``import remoteops`` stays light: the embedded target (asyncssh, cryptography) is imported explicitly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import remoteops

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"asyncssh", "cryptography"}
_REPORT = "import json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"


def _packages_after(statement: str) -> set[str]:
    """The top-level packages loaded by ``statement`` in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", f"{statement}\n{_REPORT}"],
        capture_output=True,
        check=True,
        timeout=60,
        cwd=ROOT,
        text=True,
    )
    return set(json.loads(proc.stdout))


def test_import_remoteops_loads_neither_asyncssh_nor_cryptography() -> None:
    loaded = _packages_after("import remoteops")
    assert "remoteops" in loaded
    assert loaded & HEAVY == set()
    assert "EmbeddedTarget" not in remoteops.__all__


@pytest.mark.slow  # three interpreter start-ups
def test_the_embedded_target_loads_asyncssh_only_when_imported_explicitly() -> None:
    assert "asyncssh" in _packages_after("from remoteops.embedded import EmbeddedTarget")
    assert "asyncssh" not in _packages_after("import gateway._demo")  # imported when the demo starts
