"""No input reaches ``internal_error``: any arguments the tools' input schemas admit, sent through MCP to the
gateway serving the embedded demo target, give a normal result or a validation/policy error.

Arguments are generated from each tool's advertised ``inputSchema`` (the JSON Schema subset pydantic emits;
an unknown keyword fails the test, so a new tool cannot slip by with a weak strategy), with the hostile
values mixed in: NUL bytes, lone surrogates (in values: the Python client cannot even send them in keys),
empty strings, an argv of one empty string, huge integers.

Commands really run (as this user, on this machine, through OpenSSH and the embedded target), so two
limits keep the fuzzing harmless: the gateway's configured time limits are short (2 s default, 30 s
ceiling: a longer ``timeout_s`` is a validation error), and a generated ``cwd`` that would leave the
sandbox (absolute, ``~``, ``..``) is not used. Every task ``task_start`` starts is cancelled at once (and the
task root, its tmux server and any process carrying a task marker are removed with the fixture).
"""

from __future__ import annotations

import base64
import binascii
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp import Client

from gateway._demo import demo_settings
from gateway._dispatch import error_payload
from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import build_server
from gateway.tools import all_specs, files, files_search
from tests.fixtures.profiles import examples
from tests.remoteops.task_helpers import remote_root

pytestmark = pytest.mark.slow

Served = tuple[BlockingPortal, Client, dict[str, types.Tool]]
ALLOWED_FAILURES = {"validation_error", "policy_denied"}
# Tools over stored objects answer a generated (well-formed, unknown) ID with not_found: a normal answer.
# The embedded demo target has no nvidia-smi and no systemd: those tools meet a missing capability there.
_NO_SYSTEMD = {"missing_remote_capability"}
ALLOWED_BY_PREFIX = {
    "task_": {"not_found"},
    "forward_": {"not_found"},
    "session_": {"not_found"},
    "gpu_info": {"missing_remote_capability"},
    "disk_usage": {"not_found"},  # a generated path that does not exist in the sandbox
    "systemd_": _NO_SYSTEMD,
    "service_": _NO_SYSTEMD,
    "journal_": {"remote_nonzero_exit"},  # journalctl without any journal file exits 1, saying nothing
    "admin_transaction": _NO_SYSTEMD,
}
# Not fuzzed here, each for a reason (their bad input has its own tests): generated local/remote paths with
# `delete` could reach outside any sandbox (transfers).
# forward_create/forward_close start and stop ssh processes that outlive the runtime by design (their failures
# are pinned in tests/remoteops/test_forwards.py). session_ensure creates a tmux server and a shell on the
# target that outlive the test by design (its bad input is pinned in tests/gateway/test_session_tools.py);
# without it the other session tools meet only unknown names (not_found) or bad input. process_signal would
# signal processes of this very machine (the demo target) by generated pid and name: its bad input and its
# refusals are pinned in tests/remoteops/test_system.py and tests/gateway/test_system_tools.py.
NOT_FUZZED = {
    "process_signal",
    "remote_upload",
    "remote_download",
    "remote_sync",
    "session_ensure",
    "forward_create",
    "forward_close",
}
# file tools on random names: the file is not there, or is already there
FILE_TOOLS = {spec.name for spec in files.SPECS + files_search.SPECS}
FILE_FAILURES = {"not_found", "conflict"}
_IGNORED_KEYWORDS = {"title", "description", "default"}
_HOSTILE_TEXT = ["", "\x00", "a\x00b", "\ud800", "x\udfff", "demo", " ", "-", "\n"]


def _text(*, min_size: int = 0, max_size: int | None = None, surrogates: bool = True) -> Any:
    size = {"min_size": min_size, "max_size": max_size if max_size is not None else 40}
    fuzzed = st.text(st.characters(exclude_categories=("Cs",)), **size)
    if surrogates:
        fuzzed = st.one_of(fuzzed, fuzzed, st.text(st.characters(exclude_categories=()), **size))
    hostile = st.sampled_from(
        [t for t in _HOSTILE_TEXT if len(t) >= min_size and (max_size is None or len(t) <= max_size)]
        if surrogates
        else [t for t in _HOSTILE_TEXT if "\ud800" not in t and "\udfff" not in t and len(t) >= min_size]
    )
    return st.one_of(hostile, fuzzed)


def from_schema(schema: dict[str, Any], name: str = "") -> Any:
    """A hypothesis strategy for values the JSON schema admits (the subset pydantic emits)."""
    unknown = set(schema) - _IGNORED_KEYWORDS - {
        "type", "properties", "required", "additionalProperties", "anyOf", "oneOf", "discriminator",
        "minLength", "maxLength",
        "items", "minItems", "maxItems", "exclusiveMinimum", "minimum", "maximum", "enum", "const", "pattern",
    }  # fmt: skip
    assert not unknown, f"schema keyword(s) {unknown} at {name!r}: teach from_schema about them"
    if "anyOf" in schema or "oneOf" in schema:  # a discriminator only names the tag: the options carry it
        options = schema.get("anyOf", schema.get("oneOf"))
        return st.one_of([from_schema(option, name) for option in options])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        if isinstance(extra, dict):  # a mapping such as env: keys the client can encode, any values
            keys = st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z"), _text(surrogates=False))
            return st.dictionaries(keys, from_schema(extra, f"{name}.*"), max_size=4)
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        strategies = {key: from_schema(sub, key) for key, sub in properties.items()}
        return st.fixed_dictionaries(
            {k: v for k, v in strategies.items() if k in required},
            optional={k: v for k, v in strategies.items() if k not in required},
        )
    if kind == "string" and "pattern" in schema:
        return st.one_of(st.from_regex(schema["pattern"], fullmatch=True), _text(max_size=80))
    if kind == "string":
        text = _text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength"))
        if "pattern" in schema:  # mostly values that match (so calls get past validation), some that do not
            return st.one_of(st.from_regex(schema["pattern"], fullmatch=True), text)
        return text
    if kind == "array":
        items = from_schema(schema["items"], f"{name}[]")
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(5, schema.get("maxItems", 5)))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind in ("number", "integer"):
        exclusive = "exclusiveMinimum" in schema
        low = schema.get("exclusiveMinimum", schema.get("minimum"))
        high = schema.get("maximum")
        ints = st.integers(min_value=None if low is None else int(low) + 1, max_value=high)
        huge = [] if high is not None else [st.integers(min_value=1, max_value=10**400), st.just(10**400)]
        if kind == "integer":
            return st.one_of(ints, *huge)
        floats = st.floats(
            min_value=low, max_value=high, exclude_min=exclusive, allow_nan=False, allow_infinity=False
        )
        return st.one_of(floats, *huge)
    raise AssertionError(f"schema type {kind!r} at {name!r}: teach from_schema about it")


def _only(schema: dict[str, Any], keep: str, drop: str) -> dict[str, Any]:
    """The schema with ``keep`` required and ``drop`` left out (a narrower part of what it admits)."""
    properties = {k: v for k, v in schema["properties"].items() if k != drop}
    return {**schema, "properties": properties, "required": [*schema.get("required", ()), keep]}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """The schema with every local ``$ref`` (nested models: patch hunks) replaced by its definition."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    return schema


def _arguments(tool: types.Tool) -> Any:
    schema = _inline(tool.input_schema, tool.input_schema.get("$defs", {}))
    strategy = from_schema(schema, tool.name)
    if {"argv", "shell"} <= set(schema.get("properties", {})):
        # remote_exec takes exactly one of them: mostly send one, so that the calls get to run.
        strategy = st.one_of(
            strategy,
            from_schema(_only(schema, "argv", "shell"), tool.name),
            from_schema(_only(schema, "shell", "argv"), tool.name),
        )
    if "target" in tool.input_schema.get("properties", {}):
        # Bias towards the one configured target, so the calls get past policy into remoteops.
        return strategy.flatmap(
            lambda args: st.sampled_from(["demo", args.get("target", "demo")]).map(
                lambda target: {**args, "target": target}
            )
        )
    return strategy


@asynccontextmanager
async def _gateway(workdir: Path, task_root: Path) -> AsyncIterator[tuple[Client, list[types.Tool]]]:
    base = Settings.model_validate(
        {
            "state_dir": str(workdir / "state"),
            "tasks": {"remote_dir": str(task_root)},
            "transport": {
                "control_dir": str(workdir / "cm"),
                "exec_timeout_default_s": 2,
                # Below the 30 s capability probe: the gateway's own probes obey the operator's ceiling.
                "exec_timeout_max_s": 5,
            },
            # teardown too: remote_delete is fuzzed (on relative paths, inside the embedded sandbox)
            # root too: remote_root_exec on the demo target (not in root.targets) is policy_denied
            "tools": {"toolsets": ["inspect", "manage", "execute", "teardown", "root", "upstream"]},
        }
    )
    async with (
        demo_settings(base, workdir / "demo") as effective,
        Runtime(effective, all_specs(), redactor=Redactor()) as rt,
        Client(build_server(rt, stdio_principal="fuzz"), mode="legacy") as client,
    ):
        yield client, (await client.list_tools()).tools


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    workdir = Path(tempfile.mkdtemp(prefix="rogf-", dir="/tmp"))  # short: ControlPath limit
    try:
        with (
            remote_root() as task_root,
            start_blocking_portal() as portal,
            portal.wrap_async_context_manager(_gateway(workdir, task_root)) as (client, tools),
        ):
            yield portal, client, {t.name: t for t in tools}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _leaves(path: object) -> bool:
    return isinstance(path, str) and (path.startswith(("/", "~")) or ".." in path)


def _stays_in_sandbox(arguments: dict[str, Any]) -> bool:
    """No cwd, and no file tool path (text or base64), outside the embedded target's sandbox."""
    for key in ("cwd", "path", "source", "destination"):
        if _leaves(arguments.get(key)):
            return False
        encoded = arguments.get(f"{key}_b64")
        if isinstance(encoded, str):
            try:
                decoded = base64.b64decode(encoded, validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                continue  # refused as validation_error before anything runs
            if _leaves(decoded):
                return False
    return True


def _check(served: Served, name: str, args: dict[str, Any]) -> None:
    portal, client, _ = served
    result = portal.call(client.call_tool, name, args)
    if result.is_error:
        error = error_payload(result)
        assert error is not None, result
        allowed = ALLOWED_FAILURES.union(*(v for k, v in ALLOWED_BY_PREFIX.items() if name.startswith(k)))
        allowed |= FILE_FAILURES if name in FILE_TOOLS else set()
        assert error["code"] in allowed, (name, error)
        assert result.structured_content is None
    elif name == "task_start":  # a detached task: stop it now, it must not outlive the example
        assert result.structured_content is not None
        cancelled = portal.call(client.call_tool, "task_cancel", {"task_id": result.structured_content["id"]})
        assert cancelled.is_error is not True, cancelled


_TOOL_NAMES = [spec.name for spec in all_specs() if spec.name not in NOT_FUZZED]


@pytest.mark.parametrize("name", _TOOL_NAMES)
def test_any_arguments_the_input_schema_admits_never_end_as_internal_error(served: Served, name: str) -> None:
    tool = served[2][name]

    @settings(
        max_examples=examples({"remote_exec": 150, "task_start": 40}.get(name, 15)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        database=None,
    )
    @given(args=_arguments(tool))
    def run(args: dict[str, Any]) -> None:
        assume(_stays_in_sandbox(args))
        _check(served, name, args)

    run()


@pytest.mark.parametrize(
    "args",
    [
        {"argv": ["echo", "a\x00b"]},
        {"argv": ["\x00"]},
        {"argv": [""]},
        {"argv": ["", "x"]},
        {"argv": ["true"], "env": {"A": "x\x00"}},
        {"argv": ["true"], "cwd": "sub\x00dir"},
        {"argv": ["true"], "env": {"": "x"}},
        {"argv": ["echo", "\ud800"]},
        {"shell": "echo \x00"},
        {"shell": "true", "stdin": "\udfff"},
        {"argv": ["true"], "timeout_s": 10**400},
        {"argv": ["true"], "timeout_s": 1e308},
        {"argv": ["true"], "stdin": "not base64!", "stdin_encoding": "base64"},
        {"argv": []},
        {"shell": ""},
        {"argv": ["true"], "shell": "true"},
    ],
)
def test_hostile_remote_exec_arguments_are_validation_errors_or_normal_results(
    served: Served, args: dict[str, Any]
) -> None:
    _check(served, "remote_exec", {"target": "demo", **args})


def test_an_argv_of_one_empty_string_is_a_validation_error_naming_argv(
    served: Served,
) -> None:
    portal, client, _ = served
    result = portal.call(client.call_tool, "remote_exec", {"target": "demo", "argv": [""]})
    error = error_payload(result)
    assert error is not None
    assert error["code"] == "validation_error"
    assert "argv" in error["details"]["field"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"argv": ["echo", "a\x00b"]}, "argv[1]"),
        ({"argv": [""]}, "argv[0]"),
        ({"shell": "echo \x00"}, "shell"),
        ({"argv": ["true"], "cwd": "sub\x00dir"}, "cwd"),
        ({"argv": ["true"], "env": {"A": "x\x00"}}, "env.A"),
    ],
)
def test_a_task_start_argument_remoteops_refuses_is_a_validation_error_naming_the_field(
    served: Served, args: dict[str, Any], field: str
) -> None:
    portal, client, _ = served
    result = portal.call(client.call_tool, "task_start", {"target": "demo", **args})
    error = error_payload(result)
    assert error is not None, result
    assert error["code"] == "validation_error"
    assert error["details"]["field"] == field
    listed = portal.call(client.call_tool, "task_list", {"target": "demo", "state": "failed"})
    assert listed.structured_content is not None
    assert listed.structured_content["total"] == 0  # refused before anything was recorded


def test_a_task_wait_longer_than_the_exec_ceiling_waits_in_segments_under_it(served: Served) -> None:
    # The gateway's exec ceiling here is 5 s: the task programs (start, wait segments) obey it, and a wait
    # for longer than it still ends with the task's exit.
    portal, client, _ = served
    started = portal.call(client.call_tool, "task_start", {"target": "demo", "shell": "sleep 5.5; exit 4"})
    assert started.structured_content is not None, started
    task_id = started.structured_content["id"]
    waited = portal.call(client.call_tool, "task_wait", {"task_id": task_id, "timeout_s": 20})
    assert waited.is_error is not True, waited
    assert waited.structured_content is not None
    assert (waited.structured_content["outcome"], waited.structured_content["exit_code"]) == ("exited", 4)


def test_the_fuzzed_gateway_really_runs_commands_on_the_demo_target(
    served: Served,
) -> None:
    portal, client, _ = served
    result = portal.call(client.call_tool, "remote_exec", {"target": "demo", "argv": ["echo", "fuzz-ok"]})
    assert result.is_error is not True
    assert result.structured_content is not None
    assert result.structured_content["stdout"] == "fuzz-ok\n"
