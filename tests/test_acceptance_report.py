"""The acceptance suite's own pieces: reading error codes in every form the gateway uses, the report's
verdict and rendering, and the phase registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import acceptance._systemd_service as service
from acceptance._mcp import error_code, error_of
from acceptance._registry import REGISTRY, not_built
from acceptance._report import CleanupCheck, PhaseResult, Report, Status
from acceptance._runner import selected_phases

ERROR = {"code": "host_key_error", "message": "changed", "retryable": False, "details": {"target": "t"}}


@pytest.mark.parametrize(
    "result",
    [
        {"isError": True, "structuredContent": {"error": ERROR}, "content": [{"type": "text", "text": "x"}]},
        {"isError": True, "content": [{"type": "text", "text": json.dumps(ERROR)}]},
        {"isError": True, "content": [{"type": "text", "text": json.dumps({"error": ERROR})}]},
        {
            "isError": True,
            "content": [{"type": "text", "text": "host_key_error: changed"}],
            "_meta": {"remoteops-gateway/error": ERROR},
        },
    ],
    ids=["structured-content", "text-json", "text-json-under-error", "meta"],
)
def test_an_error_code_is_read_from_any_form_the_gateway_uses(result: dict[str, object]) -> None:
    assert error_of(result) == ERROR
    assert error_code(result) == "host_key_error"


def test_a_success_has_no_error_and_an_unstructured_failure_has_a_null_code() -> None:
    assert error_of({"isError": False, "structuredContent": {"error": ERROR}}) is None
    assert error_code({"content": []}) is None
    unstructured = error_of({"isError": True, "content": [{"type": "text", "text": "boom"}]})
    assert unstructured == {"code": None, "message": "boom"}


def _report(*phases: PhaseResult) -> Report:
    return Report(mode="quick", started_at="t0", phases=list(phases))


def test_a_failed_phase_or_a_skip_without_reason_fails_the_run_while_not_built_does_not() -> None:
    passed = PhaseResult("a", "A", Status.PASSED, figures={"n": 1})
    unbuilt = PhaseResult("b", "B", Status.NOT_BUILT, reason="not built yet: b")
    assert _report(passed, unbuilt).ok is True
    assert _report(passed, PhaseResult("c", "C", Status.FAILED, error="x")).ok is False
    assert _report(passed, PhaseResult("d", "D", Status.SKIPPED)).ok is False
    assert _report(passed, PhaseResult("d", "D", Status.SKIPPED, reason="no root")).ok is True
    leaky = _report(passed)
    leaky.final_cleanup.append(CleanupCheck("pid 1 gone", False))
    assert leaky.ok is False


def test_the_report_is_written_as_json_and_markdown(tmp_path: Path) -> None:
    report = _report(
        PhaseResult("a", "first", Status.PASSED, 1.5, {"median_ms": 3.2}, cleanup=[CleanupCheck("x", True)]),
        PhaseResult("b", "second", Status.NOT_BUILT, reason="not built yet: b"),
    )
    json_path, md_path = report.write(tmp_path)
    data = json.loads(json_path.read_text())
    assert data["ok"] is True
    assert data["counts"] == {"passed": 1, "failed": 0, "skipped": 0, "not_built": 1}
    assert data["phases"][0]["figures"] == {"median_ms": 3.2}
    assert data["phases"][0]["cleanup_ok"] is True
    markdown = md_path.read_text()
    assert "| `a` first | passed | 1.5 | median_ms=3.2 |" in markdown
    assert "| `b` second | not_built | 0.0 | not built yet: b |" in markdown


def test_the_registry_lists_each_phase_once_and_refuses_a_duplicate() -> None:
    selected_phases()
    names = [p.name for p in REGISTRY]
    assert len(names) == len(set(names))
    assert all(p.reason for p in REGISTRY if p.run is None)
    with pytest.raises(ValueError, match="twice"):
        not_built(names[0], "again", "anything")


def test_a_checkout_under_tmp_is_named_as_unusable_for_the_units(monkeypatch: pytest.MonkeyPatch) -> None:
    # the gateway unit's PrivateTmp=yes hides /tmp: the service scenario says so instead of a failed start
    monkeypatch.setattr(service, "ROOT", Path("/tmp/some-clone"))
    reason = service.checkout_unusable_reason()
    assert reason is not None
    assert "PrivateTmp" in reason
