"""The unit-name grammar, systemctl show parsing and denial detection: no target needed."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from remoteops import ExecResult, InvalidRequest, UnitName, check_unit, service_unit
from remoteops.systemd.operations import parse_show
from remoteops.systemd.runner import denial

GOOD = (
    "nginx.service",
    "getty@tty1.service",
    "foo@.service",
    "a.timer",
    "x.slice",
    "-.slice"[1:] + "y.mount",
    "systemd-fsck@dev-disk-by\\x2duuid-1234.service",
)


def test_the_grammar_takes_types_templates_and_canonical_escapes_only() -> None:
    from tests.remoteops.test_systemd import HOSTILE

    adapter = TypeAdapter(UnitName)
    for good in GOOD:
        assert check_unit(good) == good
        assert adapter.validate_python(good) == good
    for bad in HOSTILE:
        with pytest.raises(InvalidRequest):
            check_unit(bad)
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


def test_a_service_shorthand_names_its_service_unit_and_refuses_anything_else() -> None:
    assert service_unit("nginx") == "nginx.service"
    assert service_unit("getty@tty1.service") == "getty@tty1.service"
    for bad in ("x;y", "-x", "a b", "", "a/b"):
        with pytest.raises(InvalidRequest):
            service_unit(bad)


def test_show_output_is_one_block_per_unit_and_values_keep_their_equals_signs() -> None:
    text = "Id=a.service\nExecStart={ path=/bin/x ; argv[]=x a=b }\n\nId=b.service\nActiveState=active\n"
    assert parse_show(text) == [
        {"Id": "a.service", "ExecStart": "{ path=/bin/x ; argv[]=x a=b }"},
        {"Id": "b.service", "ActiveState": "active"},
    ]


def _result(exit_code: int, stderr: str) -> ExecResult:
    return ExecResult(target="t", exit_code=exit_code, stdout="", stderr=stderr, duration_ms=1.0)


def test_systemd_denials_are_recognised_and_other_failures_are_not() -> None:
    assert denial(_result(1, "Failed to start x.service: Interactive authentication required.\n"))
    assert denial(_result(1, "No journal files were opened due to insufficient permissions.\n"))
    assert denial(
        _result(0, "Hint: You are currently not seeing messages from other users and the system.\n")
    )
    assert denial(_result(1, "Job for x.service failed because the control process exited\n")) is None
    assert denial(_result(0, "")) is None
