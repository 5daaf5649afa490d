"""The pure pieces of transfers (no sshd): local roots, wildcard escaping, the ssh words rsync and scp get,
and the parsing of rsync's itemized output."""

from __future__ import annotations

from pathlib import Path

import pytest

from remoteops import InvalidRequest, LocalPathDenied
from remoteops.transfers.paths import (
    LocalRoots,
    escape_glob,
    rsh_command,
    scp_options,
    staged_name,
    validate_remote_path,
)
from remoteops.transfers.run import parse_item


def test_local_roots_resolve_relative_paths_and_refuse_escapes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "inside-link").symlink_to(root / "sub")
    (root / "outside-link").symlink_to(tmp_path)
    roots = LocalRoots([root])
    assert roots.resolve("sub/new-file") == root / "sub" / "new-file"
    assert roots.resolve("inside-link/x") == root / "sub" / "x"
    assert roots.resolve(str(root)) == root
    for raw, reason in (
        ("outside-link/x", "symlink_escape"),
        ("sub/../../x", "dotdot"),
        (str(tmp_path / "elsewhere"), "outside_roots"),
    ):
        with pytest.raises(LocalPathDenied) as caught:
            roots.resolve(raw)
        assert caught.value.reason == reason
    with pytest.raises(LocalPathDenied) as none:
        LocalRoots([]).resolve("x")
    assert none.value.reason == "no_roots"
    with pytest.raises(InvalidRequest):
        roots.resolve("bad\x00name")


def test_remote_paths_keep_their_bytes_and_a_leading_dash_gets_dot_slash() -> None:
    assert validate_remote_path("-rf", target="t") == "./-rf"
    assert validate_remote_path("a b\nc", target="t") == "a b\nc"
    with pytest.raises(InvalidRequest):
        validate_remote_path("a\x00b", target="t")


def test_only_components_holding_a_wildcard_are_escaped() -> None:
    assert escape_glob("/plain dir/x[1]*?/back\\slash") == "/plain dir/x\\[1\\]\\*\\?/back\\slash"
    assert escape_glob("/x\\[y]") == "/x\\\\\\[y\\]"
    staged = staged_name("/d/name[1]")
    assert staged.startswith("/d/.rog-in.")
    assert not set("*?[") & set(staged)
    assert staged == staged_name("/d/name[1]")  # stable: its partial file is found again


def test_the_rsync_e_string_single_quotes_every_word() -> None:
    assert rsh_command(["ssh", "-F", "/a dir/it's"]) == "'ssh' '-F' '/a dir/it''s'"
    with pytest.raises(InvalidRequest):
        rsh_command(["ssh", "-o", "X=a\nb"])


def test_ssh_words_translate_to_scp_or_are_refused() -> None:
    words = ["ssh", "-F", "cfg", "-o", "BatchMode=yes", "-l", "u", "-p", "2222", "-T", "-S", "/cp"]
    assert scp_options(words) == [
        "-F", "cfg", "-o", "BatchMode=yes", "-o", "User=u", "-P", "2222", "-o", "ControlPath=/cp",
    ]  # fmt: skip
    assert scp_options(["/opt/ssh", "-T"]) == ["-S", "/opt/ssh"]
    with pytest.raises(ValueError, match="no scp translation"):
        scp_options(["ssh", "-A"])


def test_itemized_lines_decode_escaped_names_and_actions() -> None:
    created = parse_item(b"<f+++++++++ new\\#012line \\#303\\#274")
    assert created is not None
    assert (created.path, created.kind, created.action) == ("new\nline ü", "file", "created")
    updated = parse_item(b">f.st...... data.bin")
    assert updated is not None
    assert (updated.kind, updated.action) == ("file", "updated")
    deleted = parse_item(b"*deleting   old dir/")
    assert deleted is not None
    assert (deleted.path, deleted.action) == ("old dir/", "deleted")
    assert parse_item(b"Number of files: 3") is None
