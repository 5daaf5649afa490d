"""The argument rules are written once in remoteops: the library's checks and the models the gateway
publishes refuse the same input, naming the same field."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from remoteops import (
    CommandRequest,
    FileMode,
    ForwardSpec,
    InvalidRequest,
    Sha256Hex,
    TreeDepth,
    check_bytes_or_lines,
    check_time_limit,
)
from remoteops.files.requests import checked
from remoteops.requests import check_env, check_pattern_line, command_words


@pytest.mark.parametrize(
    "fields",
    [{}, {"argv": ["true"], "shell": "true"}],
    ids=["neither", "both"],
)
def test_a_command_needs_exactly_one_of_argv_or_shell(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as direct:
        command_words(fields.get("argv"), fields.get("shell"))
    assert direct.value.field == "argv"
    with pytest.raises(ValidationError) as model:
        CommandRequest.model_validate({"target": "web", **fields})
    assert [err["loc"] for err in model.value.errors()] == [()]


def test_a_bad_environment_name_is_refused_by_the_model_and_the_library_alike() -> None:
    with pytest.raises(InvalidRequest) as direct:
        check_env({"GOOD": "1", "BAD-NAME": "x"})
    assert direct.value.field == "env.BAD-NAME"
    with pytest.raises(ValidationError) as model:
        CommandRequest.model_validate({"target": "web", "argv": ["env"], "env": {"BAD-NAME": "x"}})
    assert [err["loc"] for err in model.value.errors()] == [("env",)]
    assert CommandRequest(target="web", argv=["env"], env={"_OK1": "x"}).env == {"_OK1": "x"}


def test_unknown_request_fields_are_refused() -> None:
    with pytest.raises(ValidationError) as info:
        CommandRequest.model_validate({"target": "web", "argv": ["true"], "command": "true"})
    assert [err["type"] for err in info.value.errors()] == ["extra_forbidden"]


@pytest.mark.parametrize(
    ("value", "zero_ok", "ok"),
    [
        (1.0, False, True),
        (60.0, False, True),
        (60.001, False, False),
        (0.0, False, False),
        (0.0, True, True),
        (-1.0, True, False),
        (math.inf, False, False),
        (math.nan, True, False),
    ],
)
def test_a_time_limit_lies_within_its_ceiling(value: float, zero_ok: bool, ok: bool) -> None:
    if ok:
        assert check_time_limit(value, 60.0, zero_ok=zero_ok) == value
        return
    with pytest.raises(InvalidRequest) as info:
        check_time_limit(value, 60.0, zero_ok=zero_ok, target="web")
    assert (info.value.field, info.value.target) == ("timeout_s", "web")


@pytest.mark.parametrize("pattern", ["", "a\nb", "a\0b", "x" * 1001])
def test_a_line_pattern_is_one_bounded_line(pattern: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_pattern_line(pattern)
    assert info.value.field == "pattern"


def test_file_argument_types_refuse_out_of_range_values_naming_the_field() -> None:
    assert checked("mode", FileMode, 0o7777) == 0o7777
    assert checked("depth", TreeDepth, 64) == 64
    for field, kind, value in (
        ("mode", FileMode, 0o10000),
        ("mode", FileMode, -1),
        ("expected_sha256", Sha256Hex, "A" * 64),
        ("depth", TreeDepth, 0),
    ):
        with pytest.raises(InvalidRequest) as info:
            checked(field, kind, value)
        assert info.value.field == field


def test_a_read_takes_bytes_or_lines_never_both() -> None:
    check_bytes_or_lines(None, None, 2, 3)
    check_bytes_or_lines(5, 10, None, None)
    with pytest.raises(InvalidRequest) as info:
        check_bytes_or_lines(None, 10, None, 1)
    assert info.value.field == "start_line/line_count"


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"kind": "local", "dest_host": "db;rm", "dest_port": 5432}, ("dest_host",)),
        ({"kind": "dynamic", "dest_port": 1}, ()),
        ({"kind": "remote", "dest_host": "db"}, ()),
        ({"kind": "local", "bind_port": 0, "dest_host": "db", "dest_port": 1}, ("bind_port",)),
    ],
)
def test_a_forward_request_is_checked_where_it_is_defined(
    fields: dict[str, Any], loc: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as info:
        ForwardSpec.model_validate({"target": "web", **fields})
    assert [err["loc"] for err in info.value.errors()] == [loc]
