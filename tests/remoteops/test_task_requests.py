"""A task request remoteops cannot run is refused before anything is recorded or started, as
``InvalidRequest`` naming the field (never a bare ``ValueError``)."""

from __future__ import annotations

from typing import Any

import pytest

from remoteops import InvalidRequest
from remoteops.tasks.upkeep import checked_command


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"argv": ["true"], "shell": "true"}, "argv"),
        ({}, "argv"),
        ({"argv": []}, "argv"),
        ({"argv": [""]}, "argv[0]"),
        ({"argv": ["echo", "a\x00b"]}, "argv[1]"),
        ({"argv": ["echo", "\ud800"]}, "argv[1]"),
        ({"shell": "echo \x00"}, "shell"),
        ({"shell": "echo \udfff"}, "shell"),
        ({"argv": ["true"], "cwd": "a\x00b"}, "cwd"),
        ({"argv": ["true"], "cwd": "\ud800"}, "cwd"),
        ({"argv": ["true"], "env": {"A": "x\x00"}}, "env.A"),
        ({"argv": ["true"], "env": {"A": "\ud800"}}, "env.A"),
        ({"argv": ["true"], "env": {"1A": "x"}}, "env.1A"),
        ({"argv": ["true"], "env": {"": "x"}}, "env."),
    ],
)
def test_a_task_command_that_cannot_run_is_an_invalid_request_naming_the_field(
    request_: dict[str, Any], field: str
) -> None:
    args = {"argv": None, "shell": None, "cwd": None, "env": None, **request_}
    with pytest.raises(InvalidRequest) as caught:
        checked_command(args["argv"], args["shell"], args["cwd"], args["env"], target="web")
    assert caught.value.field == field
    assert caught.value.target == "web"


def test_a_task_command_is_not_held_to_the_exec_command_line_limit() -> None:
    big = "x" * (256 * 1024)  # a task's command travels on stdin, not in ssh's command line
    words, env = checked_command(["echo", big], None, "sub dir", {"GREETING": "hello"})
    assert words == ("echo", big)
    assert env == {"GREETING": "hello"}
    assert checked_command(None, "echo hi", None, None)[0] == ("sh", "-c", "echo hi")
