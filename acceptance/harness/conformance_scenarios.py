"""The conformance suite's scenarios as this gateway meets them: which run (``RUN_SCENARIOS`` on the
pinned suite, ``ALPHA_RUN_SCENARIOS`` on the alpha), which are excluded and why, and the named checks that
cannot pass against a tools-only gateway. Shared by ``tests/gateway/test_clients.py`` (which documents each
choice and pins that every listed scenario is classified) and the acceptance conformance phase."""

from __future__ import annotations

__all__ = [
    "ALPHA_EXCLUDED",
    "ALPHA_KNOWN_GATEWAY_BUGS",
    "ALPHA_NOT_TESTABLE",
    "ALPHA_RUN_SCENARIOS",
    "EXCLUDED",
    "RUN_SCENARIOS",
]

RUN_SCENARIOS: tuple[str, ...] = (
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
)

_SUITE_TEST_TOOL = "calls a test tool of the suite's reference server that the gateway does not have"
_NOT_DECLARED = "capability a tools-only server does not declare (gateway answers -32601 Method not found)"
EXCLUDED: dict[str, str] = {
    **dict.fromkeys(
        (
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-with-logging",
            "tools-call-error",
            "tools-call-with-progress",
            "tools-call-sampling",
            "tools-call-elicitation",
            "elicitation-sep1034-defaults",
            "elicitation-sep1330-enums",
        ),
        _SUITE_TEST_TOOL,
    ),
    "json-schema-2020-12": "looks for the suite's json_schema_2020_12_tool in tools/list",
    "server-sse-polling": "drives the suite's test_reconnection tool; without it: only WARNINGs",
    **dict.fromkeys(
        (
            "logging-set-level",
            "completion-complete",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
        ),
        _NOT_DECLARED,
    ),
}

ALPHA_RUN_SCENARIOS: tuple[str, ...] = (
    *RUN_SCENARIOS,
    "server-session-lifecycle",
    "server-stateless",
    "caching",
    "http-header-validation",
    "input-required-result-unsupported-methods",
)

ALPHA_KNOWN_GATEWAY_BUGS: dict[str, dict[str, str]] = {}
"""Checks failing because of a reported gateway bug: the test xfails only if exactly these fail."""

_DIAGNOSTIC_TOOL = "needs a diagnostic tool of the suite's reference server; the suite marks it untestable"
_UNDECLARED_CACHING = "caching hints of a capability the gateway does not declare (-32601 Method not found)"
ALPHA_NOT_TESTABLE: dict[str, dict[str, str]] = {
    "server-stateless": {
        "sep-2575-server-rejects-undeclared-capability": f"{_DIAGNOSTIC_TOOL} (test_missing_capability)",
        "sep-2575-missing-capability-http-400": f"{_DIAGNOSTIC_TOOL} (test_missing_capability)",
        "sep-2575-http-server-no-independent-requests-on-stream": (
            f"{_DIAGNOSTIC_TOOL} (test_streaming_elicitation)"
        ),
        "sep-2575-server-no-log-without-loglevel": f"{_DIAGNOSTIC_TOOL} (test_logging_tool)",
    },
    "caching": {
        "sep-2549-prompts-list-caching-hints": _UNDECLARED_CACHING,
        "sep-2549-resources-list-caching-hints": _UNDECLARED_CACHING,
        "sep-2549-resources-templates-list-caching-hints": _UNDECLARED_CACHING,
    },
}

_TASKS_EXTENSION = (
    "tasks extension (io.modelcontextprotocol/tasks) the gateway does not declare; drives the suite's tools "
    "(greet, slow_compute, failing_job…)"
)
_SUITE_MRTR_TOOL = "drives the suite's test_input_required_result_* tools (Unknown tool here)"
ALPHA_EXCLUDED: dict[str, str] = {
    **EXCLUDED,
    "sep-2164-resource-not-found": f"resources: {_NOT_DECLARED}",
    "http-custom-header-server-validation": (
        "needs tools whose inputSchema carries x-mcp-header annotations; the gateway has none, so every "
        "check reports 'Not testable' as a FAILURE"
    ),
    **dict.fromkeys(
        ("sep-2640-skills-directory", "sep-2640-skills-enumeration", "sep-2640-skills-manifest"),
        "skills extension the gateway does not declare: every check SKIPPED, only wire-schema-valid passes",
    ),
    **dict.fromkeys(
        (
            "tasks-lifecycle",
            "tasks-capability-negotiation",
            "tasks-wire-fields",
            "tasks-request-state-removal",
            "tasks-mrtr-input",
            "tasks-request-headers",
            "tasks-dispatch-and-envelope",
            "tasks-required-task-error",
            "tasks-mrtr-composition",
        ),
        _TASKS_EXTENSION,
    ),
    "tasks-status-notifications": "tasks extension; the suite SKIPs its only check (harness pending rewrite)",
    **dict.fromkeys(
        (
            "input-required-result-basic-elicitation",
            "input-required-result-basic-sampling",
            "input-required-result-basic-list-roots",
            "input-required-result-request-state",
            "input-required-result-multiple-input-requests",
            "input-required-result-multi-round",
            "input-required-result-result-type",
            "input-required-result-tampered-state",
            "input-required-result-capability-check",
        ),
        _SUITE_MRTR_TOOL,
    ),
    **dict.fromkeys(
        ("input-required-result-missing-input-response", "input-required-result-ignore-extra-params"),
        f"{_SUITE_MRTR_TOOL}; only a WARNING, so it would prove nothing",
    ),
    "input-required-result-validate-input": (
        f"{_SUITE_MRTR_TOOL}; its protocol-error check passes only because the tool is unknown"
    ),
    "input-required-result-non-tool-request": (
        "asks for an InputRequiredResult from a non-tool method of a capability the gateway does not declare "
        "(-32601 Method not found)"
    ),
}
