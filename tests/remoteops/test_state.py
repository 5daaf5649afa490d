"""The atomic state store: round trips, permissions, corrupt records kept aside and reported, atomicity under
SIGKILL, writers in several processes serialised."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from remoteops import Collection, StateStore, atomic_write


class Counter(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: int
    note: str = ""


COUNTERS = Collection("counters", Counter)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.anyio
async def test_records_round_trip_in_private_files(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    await store.open()
    await store.put(COUNTERS, "a", Counter(value=1))
    await store.put(COUNTERS, "b", Counter(value=2, note="x"))
    assert await store.get(COUNTERS, "a") == Counter(value=1)
    assert await store.load_all(COUNTERS) == {"a": Counter(value=1), "b": Counter(value=2, note="x")}
    assert _mode(tmp_path / "state") == 0o700
    assert _mode(tmp_path / "state" / "counters") == 0o700
    assert _mode(tmp_path / "state" / "counters" / "a.json") == 0o600
    assert await store.delete(COUNTERS, "a") is True
    assert await store.delete(COUNTERS, "a") is False
    assert await store.get(COUNTERS, "a") is None
    assert store.problems == []


def test_a_loose_existing_state_directory_is_tightened_to_0700(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    os.chmod(root, 0o755)  # noqa: S103 - the loose mode under test
    store = StateStore(root)
    store.open_sync()
    assert _mode(root) == 0o700


def test_a_truncated_record_at_startup_is_kept_aside_and_reported(tmp_path: Path) -> None:
    root = tmp_path / "state"
    first = StateStore(root)
    first.open_sync()
    first.put_sync(COUNTERS, "good", Counter(value=7))
    first.put_sync(COUNTERS, "torn", Counter(value=8, note="will be cut"))
    torn = root / "counters" / "torn.json"
    original = torn.read_bytes()
    torn.write_bytes(original[: len(original) // 2])

    second = StateStore(root)
    second.open_sync()
    loaded = second.load_all_sync(COUNTERS)
    assert loaded == {"good": Counter(value=7)}
    [problem] = second.problems
    assert (problem.kind, problem.record_id, problem.reason) == ("counters", "torn", "not_json")
    assert problem.moved_to is not None
    aside = Path(problem.moved_to)
    assert aside.name.startswith("torn.json.corrupt-")
    assert aside.read_bytes() == original[: len(original) // 2]  # kept byte for byte, never deleted
    assert not torn.exists()
    assert second.status()["problems"][0]["record_id"] == "torn"
    # a later load does not trip over it again, and the slot is free for a new record
    assert second.load_all_sync(COUNTERS) == {"good": Counter(value=7)}
    assert len(second.problems) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "not_json"),
        (b"[1, 2]", "bad_envelope"),
        (json.dumps({"kind": "other", "version": 1, "record": {"value": 1}}).encode(), "wrong_kind"),
        (json.dumps({"kind": "counters", "version": 9, "record": {"value": 1}}).encode(), "unknown_version"),
        (json.dumps({"kind": "counters", "version": 1, "record": {"value": "x"}}).encode(), "invalid"),
        (json.dumps({"kind": "counters", "version": 1, "record": {"value": 1, "zz": 1}}).encode(), "invalid"),
    ],
)
def test_every_kind_of_unloadable_record_is_moved_aside_with_its_reason(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    store = StateStore(tmp_path / "state")
    store.open_sync()
    (tmp_path / "state" / "counters").mkdir(mode=0o700)
    (tmp_path / "state" / "counters" / "r1.json").write_bytes(content)
    assert store.load_all_sync(COUNTERS) == {}
    assert [(p.record_id, p.reason) for p in store.problems] == [("r1", reason)]
    assert list((tmp_path / "state" / "counters").glob("r1.json.corrupt-*"))


def test_older_versions_are_migrated_on_load(tmp_path: Path) -> None:
    v2 = Collection("counters", Counter, version=2, migrations={1: lambda d: {"value": d["n"], "note": "v1"}})
    store = StateStore(tmp_path / "state")
    store.open_sync()
    (tmp_path / "state" / "counters").mkdir(mode=0o700)
    old = {"kind": "counters", "version": 1, "record": {"n": 5}}
    (tmp_path / "state" / "counters" / "m.json").write_text(json.dumps(old))
    assert store.load_all_sync(v2) == {"m": Counter(value=5, note="v1")}
    store.put_sync(v2, "m", Counter(value=6))
    assert json.loads((tmp_path / "state" / "counters" / "m.json").read_text())["version"] == 2


def test_atomic_write_without_replace_creates_only_when_absent(tmp_path: Path) -> None:
    target = tmp_path / "token"
    atomic_write(target, b"first\n", replace=False)
    with pytest.raises(FileExistsError):
        atomic_write(target, b"second\n", replace=False)
    assert target.read_bytes() == b"first\n"
    assert _mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["token"]  # no temporary file left behind


def test_record_ids_that_could_escape_the_directory_are_refused(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.open_sync()
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="invalid record id"):
            store.put_sync(COUNTERS, bad, Counter(value=1))


_WRITER = textwrap.dedent(
    """
    import hashlib, sys
    from pathlib import Path
    from pydantic import BaseModel, ConfigDict
    from remoteops import Collection, StateStore

    class Blob(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        seq: int
        payload: str
        digest: str

    blobs = Collection("blobs", Blob)
    store = StateStore(Path(sys.argv[1]))
    store.open_sync()
    seq = 0
    while True:
        seq += 1
        payload = (str(seq) * 200_000)[: 1_500_000 + seq]
        print(seq, flush=True)
        digest = hashlib.sha256(payload.encode()).hexdigest()
        store.put_sync(blobs, "big", Blob(seq=seq, payload=payload, digest=digest))
    """
)


def _check_blob(root: Path) -> tuple[int, list[str]]:
    code = (
        "import hashlib, json, sys; from pathlib import Path; "
        "d = json.loads((Path(sys.argv[1]) / 'blobs' / 'big.json').read_text())['record']; "
        "assert hashlib.sha256(d['payload'].encode()).hexdigest() == d['digest']; print(d['seq'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True, timeout=30
    )
    return int(out.stdout), sorted(p.name for p in (root / "blobs").iterdir())


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_the_old_record_or_the_new_one(tmp_path: Path) -> None:
    root = tmp_path / "state"
    for round_ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
        )
        announced: list[int] = []
        try:
            assert proc.stdout is not None
            # wait until it announces its (2 + round)th write, then kill it while that write is under way
            announced += [int(proc.stdout.readline()) for _ in range(2 + round_)]
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                # a loaded machine may let it finish that write and announce more before the kill lands:
                # the last announcement is the write the kill could have interrupted
                announced += [int(line) for line in proc.stdout.read().split()]
                proc.stdout.close()
        seq, _names = _check_blob(root)
        assert seq in (announced[-1] - 1, announced[-1]), (seq, announced)
        # the next store to open removes the dead writer's temporary file; the record is untouched
        store = StateStore(root)
        store.open_sync()
        assert _check_blob(root) == (seq, ["big.json"])
        assert store.problems == []


_INCREMENTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pydantic import BaseModel, ConfigDict
    from remoteops import Collection, StateStore

    class Counter(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        value: int
        note: str = ""

    store = StateStore(Path(sys.argv[1]))
    store.open_sync()
    counters = Collection("counters", Counter)
    for _ in range(int(sys.argv[2])):
        store.update_sync(counters, "shared", lambda c: Counter(value=(c.value if c else 0) + 1))
    """
)


@pytest.mark.slow
def test_concurrent_writers_in_processes_and_threads_are_serialised(tmp_path: Path) -> None:
    root = tmp_path / "state"
    store = StateStore(root)
    store.open_sync()

    def bump(c: Counter | None) -> Counter:
        return Counter(value=(c.value if c else 0) + 1)

    procs = [
        subprocess.Popen([sys.executable, "-c", _INCREMENTER, str(root), "40"], cwd=os.getcwd())
        for _ in range(4)
    ]
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = [pool.submit(store.update_sync, COUNTERS, "shared", bump) for _ in range(40)]
            for future in done:
                future.result(timeout=120)
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    assert store.get_sync(COUNTERS, "shared") == Counter(value=4 * 40 + 40)  # no update lost
    assert store.problems == []
