"""The remote POSIX sh programs are ``sh/*.sh`` package data: loaded as exactly the programs that run on the
targets (directive lines left out, shared fragments included), and clean under shellcheck."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

import remoteops.sessions.scripts as sessions
import remoteops.system.operations as system
import remoteops.tasks.scripts as tasks
from remoteops._sh import program

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "remoteops").rglob("sh/*.sh"))

# sha256 of each program as it is sent. A deliberate change of a program updates its line here.
PROGRAMS = {
    "tasks supervisor": (
        tasks._SUPERVISOR,
        "bbaabeb0322cbc3350db6a2abd9076df34d22441d52bea9c74069a61f62626b8",
    ),
    "tasks start": (tasks._START, "cabb2003ecfa0696ad6648f1d94f691d2a17399ed3d1b1c7626875b60e756008"),
    "tasks wait": (tasks.WAIT_SCRIPT, "4b58fd433af63f5ccaad2921bb757efece5e9f0543f6948754b8fb7def5132eb"),
    "tasks read": (tasks.READ_SCRIPT, "33c623674afcfba47f3298f5de48cab9063076eb6883c15ff2620bfade0e23eb"),
    "tasks cancel": (tasks.CANCEL_SCRIPT, "883e6c9a0c613777339cbec7855c934872ff26cb531d8f8ccc49e04d0f8c3b77"),
    "tasks purge": (tasks.PURGE_SCRIPT, "6f65de63b1ca001f61ba521bcd52a0f6b1f9e2496f3b01182e487a1894594f2f"),
    "sessions ensure": (
        sessions.ENSURE_SCRIPT,
        "5abf2e1bdd1baa8feb4df145c165e1baa27ed7071f6ca82c754285ad528e2386",
    ),
    "sessions look": (
        sessions.LOOK_SCRIPT,
        "645ef122d53fd8ec94313bb977f4f2f0ec13c8e2c2b69b4074722a06a14e94ab",
    ),
    "sessions read": (
        sessions.READ_SCRIPT,
        "27a58e33e5ac9f695532c502e82b3149ef34d6d10b39d4e8d8b4e708db10b7a8",
    ),
    "sessions wait": (
        sessions.WAIT_SCRIPT,
        "b3acf3cac4170910c7c4513f7810759e5a816650f0c351128b162a2e9b525302",
    ),
    "sessions close": (
        sessions.CLOSE_SCRIPT,
        "fd93606557f8d69ba8d9ed9205eedfcaedcdacedb997b817aacfeff611c594d8",
    ),
    "sessions send": (sessions._SEND, "6b0c0411c9078e14458afa20a57630553f5e319d260da7ee8cf507f33e2afff8"),
    "system info": (
        system.INFO_SCRIPT,
        "24ed6fe0c557a4178a507f2a454fabcc783f513738dbeae265238298df933d4e",
    ),
    "system procs": (
        system.PROCS_SCRIPT,
        "8b09d1770b2c59c8539c216d1802f36b4f5a757985783ee6796f3de0103d8fa6",
    ),
    "system ports": (
        system.PORTS_SCRIPT,
        "71e618e1b5eb632e1c91b5ce9eb87d8bfefeab5c77a9bed14698bb4d8ae783dc",
    ),
    "system disk": (
        system.DISK_SCRIPT,
        "d62170f55a5ea004e53c5f75f9c101423960d8dddaa07dc2aa66a00285192f6b",
    ),
    "system gpu": (
        system.GPU_SCRIPT,
        "9dabc8186f20ca3422b8b2367888181cb4920eab3cd703c8e6265060965e50bc",
    ),
    "system signal": (
        system.SIGNAL_SCRIPT,
        "8f271bcb5411675032bf5792111fb817ed0e6ecfac0b15c38dfc90a7d52d3911",
    ),
    "a task's starter": (
        tasks.start_script(task_id="t-1", nonce="n", root="r", want="w", cmd_text="c"),
        "11b8fc96c59162e312f29d32a9dd164f0d234b2f7726b770db953e9b480b330c",
    ),
    "a send program": (
        sessions.send_script(b"hello \x00 world"),
        "0adb4490aee4a6c5663e2c251a0ac3f3805cabfeeb184e04596bb523b0f5e14b",
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_loaded_program_is_exactly_the_program_that_runs_on_targets(name: str) -> None:
    text, digest = PROGRAMS[name]
    assert hashlib.sha256(text.encode()).hexdigest() == digest
    assert "# shellcheck " not in text
    assert "\n. ./" not in text


def test_the_program_files_are_found() -> None:
    names = {str(path.relative_to(ROOT)) for path in FILES}
    assert {"remoteops/tasks/sh/wait.sh", "remoteops/tasks/sh/checks.sh"} <= names
    assert {"remoteops/sessions/sh/prelude.sh", "remoteops/sessions/sh/send.sh"} <= names


def test_the_loader_leaves_out_directive_lines_and_includes_fragments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "rogshdemo"
    (package / "sh").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sh" / "part.sh").write_text("# shellcheck disable=SC2034  # used by main\nx=1\n")
    (package / "sh" / "main.sh").write_text(
        "set -u\n# shellcheck source=SCRIPTDIR/part.sh\n. ./part.sh\nif :; then\n"
        "  # shellcheck disable=SC2086  # splitting wanted\n  set -- $x\nfi\n. ./part.sh # not an include\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert (
        program("rogshdemo", "main.sh")
        == "set -u\nx=1\nif :; then\n  set -- $x\nfi\n. ./part.sh # not an include\n"
    )


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_each_program_file_is_clean_under_shellcheck(path: Path) -> None:
    binary = shutil.which("shellcheck")
    if binary is None:
        pytest.skip("shellcheck is not installed (Debian package shellcheck; ops/test.sh installs it)")
    done = subprocess.run(
        [binary, "-s", "sh", "-x", "-f", "gcc", path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, ""), done.stdout + done.stderr
