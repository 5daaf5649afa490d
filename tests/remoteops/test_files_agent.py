"""The agent's file requests, run locally through the real loader (no ssh in between), on Python 3 and 3.8."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoteops.agent import program as proto
from remoteops.agent.program.files import _LinePicker
from tests.remoteops.test_agent_protocol import PYTHONS, Agent, Frame, _hello, local_agent

pytestmark = pytest.mark.anyio

HOME = os.path.expanduser("~")
ODD = b"we\xffird $(x) `y` 'q' \"d\"\n-name \xe2\x98\x83"


async def ask(agent: Agent, rid: int, kind: int, meta: dict[str, Any], data: bytes = b"") -> Frame:
    await agent.send(proto.encode(rid, kind, meta, data))
    return await agent.final(rid)


def wire(path: Path | bytes) -> str:
    return proto.wire_text(bytes(path) if isinstance(path, bytes) else os.fsencode(path))


@pytest.mark.parametrize("python", PYTHONS)
async def test_write_stat_read_list_move_delete_round_trip_an_odd_byte_name(
    python: str, tmp_path: Path
) -> None:
    content = bytes(range(256)) * 40
    path = os.fsencode(tmp_path) + b"/" + ODD
    moved = os.fsencode(tmp_path) + b"/sub/" + ODD + b".2"
    async with local_agent(python) as agent:
        await _hello(agent)
        wrote = await ask(agent, 1, proto.WRITE, {"path": wire(path), "mode": 0o640}, content)
        stat = await ask(agent, 2, proto.STAT, {"path": wire(path), "hash": True})
        read = await ask(agent, 3, proto.READ, {"path": wire(path), "offset": 10, "length": 20})
        mkdir = await ask(agent, 4, proto.MKDIR, {"path": wire(os.fsencode(tmp_path) + b"/sub")})
        move = await ask(agent, 5, proto.MOVE, {"source": wire(path), "destination": wire(moved)})
        listing = await ask(agent, 6, proto.LIST, {"path": wire(tmp_path), "depth": 2})
        delete = await ask(agent, 7, proto.DELETE, {"path": wire(moved)})
    digest = hashlib.sha256(content).hexdigest()
    assert [f[1] for f in (wrote, stat, read, mkdir, move, listing, delete)] == [proto.RESULT] * 7
    assert wrote[3] == {"sha256": digest, "size": len(content), "created": True}
    assert stat[3] is not None
    assert (stat[3]["type"], stat[3]["size"], stat[3]["mode"], stat[3]["sha256"]) == (
        "file",
        len(content),
        0o640,
        digest,
    )
    assert read[3] == {"size": len(content), "sha256": digest, "offset": 10}
    assert read[4] == content[10:30]
    assert listing[3] is not None
    assert [proto.wire_bytes(e["path"]) for e in listing[3]["entries"]] == [b"sub", b"sub/" + ODD + b".2"]
    assert os.listdir(tmp_path) == ["sub"]
    assert os.listdir(tmp_path / "sub") == []


@pytest.mark.parametrize("python", PYTHONS)
async def test_write_preconditions_answer_conflict_and_leave_the_file_alone(
    python: str, tmp_path: Path
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    old = hashlib.sha256(b"old").hexdigest()
    async with local_agent(python) as agent:
        await _hello(agent)
        exists = await ask(agent, 1, proto.WRITE, {"path": wire(path), "if_exists": "fail"}, b"new")
        stale = await ask(agent, 2, proto.WRITE, {"path": wire(path), "expected_sha256": "0" * 64}, b"new")
        fresh = await ask(agent, 3, proto.WRITE, {"path": wire(path), "expected_sha256": old}, b"new")
    assert exists[3] is not None
    assert stale[3] is not None
    assert (exists[1], exists[3]["code"], exists[3]["reason"]) == (proto.ERROR, "conflict", "exists")
    assert (stale[1], stale[3]["code"], stale[3]["sha256"]) == (proto.ERROR, "conflict", old)
    assert fresh[1] == proto.RESULT
    assert path.read_bytes() == b"new"


@pytest.mark.parametrize("python", PYTHONS)
async def test_a_write_keeps_the_mode_of_the_file_it_replaces_and_sweeps_a_dead_agents_temporary_file(
    python: str, tmp_path: Path
) -> None:
    path = tmp_path / "conf"
    path.write_bytes(b"a")
    path.chmod(0o604)
    # a temporary file of an agent that no longer runs (pid 2**22 + 1 is above any pid_max default)
    stray = tmp_path / f".conf.rog-{2**22 + 1}-0123456789abcdef.tmp"
    stray.write_bytes(b"half")
    async with local_agent(python) as agent:
        await _hello(agent)
        answer = await ask(agent, 1, proto.WRITE, {"path": wire(path)}, b"b")
    assert answer[1] == proto.RESULT
    assert (path.read_bytes(), path.stat().st_mode & 0o7777) == (b"b", 0o604)
    assert sorted(os.listdir(tmp_path)) == ["conf"]


@pytest.mark.parametrize("python", PYTHONS)
async def test_delete_refuses_root_and_home_and_protected_paths_and_needs_recursive_for_a_directory(
    python: str, tmp_path: Path
) -> None:
    keep = tmp_path / "keep"
    (keep / "inner").mkdir(parents=True)
    async with local_agent(python) as agent:
        await _hello(agent)
        root = await ask(agent, 1, proto.DELETE, {"path": "/", "recursive": True})
        home = await ask(agent, 2, proto.DELETE, {"path": HOME, "recursive": True})
        guarded = {"path": wire(tmp_path), "recursive": True, "protected": [wire(keep / "inner")]}
        holder = await ask(agent, 3, proto.DELETE, guarded)
        plain_dir = await ask(agent, 4, proto.DELETE, {"path": wire(keep)})
        done = await ask(agent, 5, proto.DELETE, {"path": wire(keep), "recursive": True})
    reasons = [(f[1], (f[3] or {}).get("code"), (f[3] or {}).get("reason")) for f in (root, home, holder)]
    assert reasons == [
        (proto.ERROR, "protected", "root"),
        (proto.ERROR, "protected", "home"),
        (proto.ERROR, "protected", "protected"),
    ]
    assert plain_dir[3] is not None
    assert (plain_dir[1], plain_dir[3]["errno"]) == (proto.ERROR, "EISDIR")
    assert done[1] == proto.RESULT
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("python", PYTHONS)
async def test_list_is_bounded_ordered_and_shows_hidden_names_only_when_asked(
    python: str, tmp_path: Path
) -> None:
    for name in ("b", "a", ".h", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_bytes(b"")
    async with local_agent(python) as agent:
        await _hello(agent)
        shallow = await ask(agent, 1, proto.LIST, {"path": wire(tmp_path)})
        deep = await ask(agent, 2, proto.LIST, {"path": wire(tmp_path), "depth": 2, "hidden": True})
        bounded = await ask(agent, 3, proto.LIST, {"path": wire(tmp_path), "depth": 2, "limit": 3})
    assert shallow[3] is not None
    assert deep[3] is not None
    assert bounded[3] is not None
    assert [e["path"] for e in shallow[3]["entries"]] == ["a", "b", "c"]
    assert [e["path"] for e in deep[3]["entries"]] == [".h", ".h/x", "a", "a/x", "b", "b/x", "c", "c/x"]
    assert [e["path"] for e in bounded[3]["entries"]] == ["a", "a/x", "b"]
    assert (shallow[3]["truncated"], bounded[3]["truncated"]) == (False, True)


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on another filesystem than ``tmp_path`` (/dev/shm is a tmpfs)."""
    path = Path(tempfile.mkdtemp(prefix="rogm-", dir="/dev/shm"))
    try:
        if path.stat().st_dev == tmp_path.stat().st_dev:
            pytest.skip("/dev/shm is on the same filesystem as the test directory here")
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_move_across_filesystems_copies_files_and_trees_then_removes_the_source(
    tmp_path: Path, other_fs: Path
) -> None:
    (tmp_path / "f").write_bytes(b"file")
    (tmp_path / "f").chmod(0o640)
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "x").write_bytes(b"x")
    (tmp_path / "tree" / "link").symlink_to("sub/x")
    (other_fs / "taken").write_bytes(b"keep")
    async with local_agent("python3") as agent:
        await _hello(agent)
        moved = await ask(
            agent, 1, proto.MOVE, {"source": wire(tmp_path / "f"), "destination": wire(other_fs / "f")}
        )
        tree = await ask(
            agent, 2, proto.MOVE, {"source": wire(tmp_path / "tree"), "destination": wire(other_fs / "tree")}
        )
        refused = await ask(
            agent, 3, proto.MOVE, {"source": wire(other_fs / "f"), "destination": wire(other_fs / "taken")}
        )
    assert (moved[3], tree[3]) == ({"cross_filesystem": True}, {"cross_filesystem": True})
    assert refused[3] is not None
    assert (refused[1], refused[3]["code"]) == (proto.ERROR, "conflict")
    assert os.listdir(tmp_path) == []
    assert ((other_fs / "f").read_bytes(), (other_fs / "f").stat().st_mode & 0o777) == (b"file", 0o640)
    assert (other_fs / "tree" / "sub" / "x").read_bytes() == b"x"
    assert os.readlink(other_fs / "tree" / "link") == "sub/x"
    assert sorted(os.listdir(other_fs)) == ["f", "taken", "tree"]
    assert (other_fs / "taken").read_bytes() == b"keep"


@pytest.mark.parametrize("python", PYTHONS)
async def test_find_and_grep_answer_on_every_supported_python(python: str, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_bytes(b"one\nneedle here\n")
    (tmp_path / "d" / "b.bin").write_bytes(b"needle\0")
    async with local_agent(python) as agent:
        await _hello(agent)
        found = await ask(agent, 1, proto.FIND, {"path": wire(tmp_path), "depth": 8, "name": "*.txt"})
        grep = await ask(agent, 2, proto.GREP, {"path": wire(tmp_path), "pattern": "needle", "context": 1})
        bad = await ask(agent, 3, proto.GREP, {"path": wire(tmp_path), "pattern": "("})
    assert found[3] is not None
    assert grep[3] is not None
    assert [e["path"] for e in found[3]["entries"]] == ["d/a.txt"]
    assert [(m["path"], m["line"], m["before"]) for m in grep[3]["matches"]] == [("d/a.txt", 2, ["one"])]
    assert grep[3]["skipped"] == [{"path": "d/b.bin", "reason": "binary"}]
    assert bad[3] is not None
    assert (bad[1], bad[3]["code"]) == (proto.ERROR, "bad_request")


def _reference_lines(data: bytes, start: int, count: int | None, cap: int) -> tuple[dict[str, Any], bytes]:
    """What a line read must answer, from a plain split of the whole content."""
    lines = re.findall(rb"[^\n]*\n|[^\n]+$", data)
    if start > len(lines):
        return {
            "offset": len(data),
            "lines": 0,
            "more_lines": False,
            "past_end": True,
            "truncated": False,
        }, b""
    offset = sum(map(len, lines[: start - 1]))
    wanted = lines[start - 1 :] if count is None else lines[start - 1 : start - 1 + count]
    fits: list[bytes] = []
    for line in wanted:
        if sum(map(len, fits)) + len(line) > cap:
            break
        fits.append(line)
    content = b"".join(fits) if fits or not wanted else wanted[0][:cap]
    found = {"offset": offset, "lines": len(fits), "more_lines": offset + len(content) < len(data)}
    return {**found, "past_end": False, "truncated": len(fits) < len(wanted)}, content


@settings(deadline=None)  # a property, not a timing: a loaded machine may pause one example
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\n", b"\xff", b"\0", b"\r"]), max_size=60).map(
        b"".join
    ),
    start=st.integers(1, 25),
    count=st.none() | st.integers(1, 10),
    cap=st.integers(1, 40),
    cuts=st.lists(st.integers(1, 9), max_size=60),
)
def test_a_line_read_answers_what_a_plain_split_gives_however_the_file_arrives_in_chunks(
    data: bytes, start: int, count: int | None, cap: int, cuts: list[int]
) -> None:
    picker = _LinePicker(start, count, cap)
    position = 0
    for size in [*cuts, len(data)]:
        picker.feed(data[position : position + size])
        position += size
    assert picker.result(len(data)) == _reference_lines(data, start, count, cap)


@pytest.mark.parametrize("python", PYTHONS)
async def test_the_agent_reads_lines_across_its_read_chunks_binary_and_without_a_final_newline(
    python: str, tmp_path: Path
) -> None:
    # 1000-byte lines: line 1049 spans the agent's 1 MiB read chunk boundary (bytes 1048000..1049000)
    big = b"".join(b"%06d" % n + b"\xff\0" * 496 + b"x\n" for n in range(1, 2101))
    (tmp_path / "big").write_bytes(big)
    (tmp_path / "tail").write_bytes(b"one\n\xfe\0two\nlast")
    (tmp_path / "empty").write_bytes(b"")

    def lines(name: str, start: int, count: int | None = None, cap: int = 1 << 20) -> dict[str, Any]:
        return {"path": wire(tmp_path / name), "start_line": start, "line_count": count, "length": cap}

    async with local_agent(python) as agent:
        await _hello(agent)
        spanning = await ask(agent, 1, proto.READ, lines("big", 1049, 2))
        last = await ask(agent, 2, proto.READ, lines("tail", 2))
        past = await ask(agent, 3, proto.READ, lines("tail", 4))
        empty = await ask(agent, 4, proto.READ, lines("empty", 1))
        capped = await ask(agent, 5, proto.READ, lines("tail", 1, None, 9))
        long_first = await ask(agent, 6, proto.READ, lines("big", 3, 1, 10))
        zero = await ask(agent, 7, proto.READ, lines("tail", 0))
        mixed = await ask(agent, 8, proto.READ, {**lines("tail", 1), "offset": 2})
    tail = b"one\n\xfe\0two\nlast"
    whole = {"size": len(big), "sha256": hashlib.sha256(big).hexdigest()}
    assert spanning[3] == {**whole, "offset": 1048000, "lines": 2, "more_lines": True, "past_end": False,
                           "truncated": False}  # fmt: skip
    assert spanning[4] == big[1048000:1050000]
    assert (last[3] or {}).get("sha256") == hashlib.sha256(tail).hexdigest()
    assert [(f[3] or {}).get(k) for f in (last, past, empty) for k in ("offset", "lines", "past_end")] == [
        *(4, 2, False),
        *(len(tail), 0, True),
        *(0, 0, True),
    ]
    assert (last[4], past[4], empty[4]) == (b"\xfe\0two\nlast", b"", b"")
    assert ((capped[3] or {}).get("truncated"), (capped[3] or {}).get("lines"), capped[4]) == (
        True,
        1,
        b"one\n",
    )
    assert ((long_first[3] or {}).get("lines"), long_first[4]) == (0, big[2000:2010])
    assert [(f[1], (f[3] or {}).get("code")) for f in (zero, mixed)] == [(proto.ERROR, "bad_request")] * 2


@pytest.mark.parametrize("python", PYTHONS)
async def test_mkdir_modes_and_stat_hash_reasons_answer_on_every_supported_python(
    python: str, tmp_path: Path
) -> None:
    os.umask(umask := os.umask(0o022))  # read the umask the agent inherits (set back at once)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    async with local_agent(python) as agent:
        await _hello(agent)
        setgid = await ask(agent, 1, proto.MKDIR, {"path": wire(tmp_path / "g"), "mode": 0o2775})
        nested = await ask(
            agent, 2, proto.MKDIR, {"path": wire(tmp_path / "p" / "q"), "parents": True, "mode": 0o1700}
        )
        default = await ask(agent, 3, proto.MKDIR, {"path": wire(tmp_path / "d")})
        bad = await ask(agent, 4, proto.MKDIR, {"path": wire(tmp_path / "x"), "mode": 0o10000})
        directory = await ask(agent, 5, proto.STAT, {"path": wire(tmp_path), "hash": True})
        dangling = await ask(agent, 6, proto.STAT, {"path": wire(tmp_path / "dangling"), "hash": True})
    assert [f[3] for f in (setgid, nested, default)] == [
        {"created": True, "mode": 0o2775},
        {"created": True, "mode": 0o1700},
        {"created": True, "mode": 0o777 & ~umask},
    ]
    assert (tmp_path / "g").stat().st_mode & 0o7777 == 0o2775
    assert (tmp_path / "p").stat().st_mode & 0o7777 == 0o777 & ~umask
    assert bad[3] is not None
    assert (bad[1], bad[3]["code"], (tmp_path / "x").exists()) == (proto.ERROR, "bad_request", False)
    assert directory[3] is not None
    assert (directory[3]["sha256"], directory[3]["sha256_error"]) == (None, "not_a_regular_file")
    assert dangling[3] is not None
    assert (dangling[3]["type"], dangling[3]["sha256"], dangling[3]["sha256_error"]) == (
        "symlink",
        None,
        "not_found",
    )
