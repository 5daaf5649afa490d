"""Tool failures as every MCP client can read them, the closed error vocabulary, and redacted details.

* A failure is an ``isError`` result without ``structuredContent`` (the TypeScript SDK validates it against
  the success ``outputSchema`` even on errors); the error is JSON text and ``_meta`` under a namespaced key.
* Validation errors name field and reason in the text, bounded, never the offending value.
* Every exception class of the remoteops, upstream and gateway trees maps onto the vocabulary explicitly;
  a subclass nobody listed still maps (a default), never crashes the call.
* Error details (ssh's stderr) pass the one Redactor before they leave.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import shutil
import tempfile
import types as pytypes
import typing
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

import gateway
import remoteops
import upstream
from gateway._dispatch import ERROR_META_KEY, error_payload, unencodable_argument
from gateway._errmap import translate
from gateway._errors import ErrorCode, ToolFailure
from remoteops import RemoteOpsError
from tests.gateway.conftest import ClientFactory
from upstream import UpstreamError

SECRET = "Planted-Known-Secret-0xC0FFEE-err"


def _error(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error is True, result
    error = error_payload(result)
    assert error is not None, result
    return error


@pytest.mark.anyio
async def test_a_failure_carries_no_structured_content_and_the_same_error_as_json_text_and_in_meta(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client() as (client, _):
        result = await client.call_tool("remote_exec", {"target": "nowhere", "argv": ["true"]})
    assert result.is_error is True
    assert result.structured_content is None
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    from_text = json.loads(block.text)["error"]
    assert result.meta is not None
    from_meta = result.meta[ERROR_META_KEY]
    assert from_text == from_meta
    assert set(from_meta) == {"code", "message", "retryable", "details"}
    assert from_meta["code"] == "policy_denied"
    assert from_meta["retryable"] is False


@pytest.mark.anyio
async def test_a_validation_error_names_each_field_and_reason_in_the_text_and_never_the_value(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client() as (client, _):
        result = await client.call_tool(
            "remote_exec", {"target": "demo", "command": SECRET, "timeout_s": "soon"}
        )
    err = _error(result)
    assert err["code"] == "validation_error"
    by_field = {tuple(e["loc"]): e["type"] for e in err["details"]["errors"]}
    assert by_field == {("command",): "extra_forbidden", ("timeout_s",): "float_parsing"}
    text = result.content[0].text  # type: ignore[union-attr]
    message = json.loads(text)["error"]["message"]
    assert "command: " in message
    assert "timeout_s: " in message
    assert SECRET not in json.dumps(result.model_dump(mode="json", by_alias=True))
    assert "soon" not in message


@pytest.mark.anyio
async def test_the_validation_message_stays_bounded_however_many_fields_are_wrong(
    gateway_client: ClientFactory,
) -> None:
    wrong = {f"unknown_field_{i:03d}_" + "x" * 100: i for i in range(200)}
    async with gateway_client() as (client, _):
        result = await client.call_tool("gateway_health", wrong)
    err = _error(result)
    assert err["code"] == "validation_error"
    assert len(err["message"]) < 1000
    assert "and 195 more" in err["message"]
    assert len(err["details"]["errors"]) <= 50


@pytest.mark.anyio
async def test_a_lone_surrogate_in_an_argument_is_a_validation_error_naming_the_argument(
    gateway_client: ClientFactory,
) -> None:
    async with gateway_client() as (client, _):
        result = await client.call_tool("remote_exec", {"target": "demo", "env": {"A": "x\ud800"}})
    err = _error(result)
    assert err["code"] == "validation_error"
    assert err["details"] == {"argument": "env.A"}


def test_unencodable_argument_finds_lone_surrogates_in_nested_values_and_keys() -> None:
    assert unencodable_argument({"argv": ["ok", "bad\ud800"]}) == "argv[1]"
    assert unencodable_argument({"env": {"\udfff": "x"}}) == "env.?"  # the path itself stays encodable
    assert unencodable_argument({"env": {"A": "fine"}, "argv": ["é", "日本"]}) is None


# --- every exception class maps onto the closed vocabulary -------------------------------------------


def _import_all(package: pytypes.ModuleType) -> None:
    """Load every module of a package so ``__subclasses__`` sees classes defined anywhere in it."""
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith(".__main__"):  # the entrypoint runs the CLI on import
            importlib.import_module(info.name)


def _all_subclasses(root: type[BaseException]) -> list[type[BaseException]]:
    seen: list[type[BaseException]] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return [cls for cls in seen if not cls.__module__.startswith("tests.")]


def _sample(annotation: Any) -> Any:
    """A value of the annotated type (enough to construct an exception carrying fields)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, pytypes.UnionType):
        return _sample(next(a for a in args if a is not type(None)))
    if annotation is bool:
        return True
    if annotation is int:
        return 3
    if annotation is float:
        return 1.5
    if annotation is str:
        return "sample"
    return None


def _instance(cls: type[BaseException]) -> BaseException:
    hints = typing.get_type_hints(cls.__init__)
    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is not param.empty:
            continue
        value = _sample(hints.get(name, str))
        if param.kind is param.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    return cls(*args, **kwargs)


def _trees() -> list[type[BaseException]]:
    for package in (remoteops, upstream, gateway):
        _import_all(package)
    return [
        *_all_subclasses(RemoteOpsError),
        *_all_subclasses(UpstreamError),
        *_all_subclasses(ToolFailure),
    ]


_ROOT_DEFAULTS = {RemoteOpsError: ErrorCode.INTERNAL_ERROR, UpstreamError: ErrorCode.UPSTREAM_AMBIGUOUS}


def test_the_walk_finds_the_exception_trees_of_all_three_packages() -> None:
    names = {cls.__name__ for cls in _trees()}
    assert {"RemoteOpsError", "HostKeyError", "UpstreamError", "UpstreamCallTimeout", "ToolFailure"} <= names


@pytest.mark.parametrize("cls", _trees(), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_exception_class_maps_explicitly_onto_the_closed_vocabulary(cls: type[BaseException]) -> None:
    exc = ToolFailure(ErrorCode.NOT_FOUND, "sample") if cls is ToolFailure else _instance(cls)
    failure = translate(exc)
    assert failure is not None
    assert failure.code in set(ErrorCode)
    if cls in _ROOT_DEFAULTS:  # the bare roots (never raised as such) get the default of their tree
        assert failure.code is _ROOT_DEFAULTS[cls]
    else:  # internal_error is only the default for a subclass nobody classified: each real one is
        assert failure.code is not ErrorCode.INTERNAL_ERROR
    payload = failure.as_dict()
    assert set(payload) == {"code", "message", "retryable", "details"}
    assert isinstance(payload["retryable"], bool)
    json.dumps(payload)


def test_a_subclass_nobody_listed_still_maps_to_a_code_instead_of_crashing() -> None:
    class NovelRemote(RemoteOpsError):
        pass

    class NovelUpstream(UpstreamError):
        pass

    remote = translate(NovelRemote("odd", target="web1"))
    up = translate(NovelUpstream("odd", upstream="term"))
    assert remote is not None
    assert up is not None
    assert remote.code is ErrorCode.INTERNAL_ERROR
    assert remote.details["target"] == "web1"
    assert up.code is ErrorCode.UPSTREAM_AMBIGUOUS  # never claims that a call did not run
    assert up.retryable is False
    assert up.details["may_have_run"] is True


# --- error details pass the one Redactor ---------------------------------------------------------------


def _leaky_ssh_config(path: Path) -> Path:
    """An alias whose ProxyCommand prints secrets on stderr and fails: ssh passes them on in its stderr."""
    script = path.parent / "leak.sh"
    script.write_text(
        f"#!/bin/sh\necho 'connecting with {SECRET} password=hunter2-Plain-Pattern' >&2\nexit 1\n"
    )
    script.chmod(0o700)
    path.write_text(f"Host leaky\n  HostName 127.0.0.1\n  ProxyCommand {script}\n  BatchMode yes\n")
    return path


@pytest.mark.anyio
async def test_a_secret_in_sshs_stderr_never_reaches_the_client_in_clear(
    gateway_client: ClientFactory, tmp_path: Path
) -> None:
    ssh_config = _leaky_ssh_config(tmp_path / "ssh_config")
    # Private (not /tmp/rog-e-<end of the test's name>, the same in every run, concurrent ones included).
    control = Path(tempfile.mkdtemp(prefix="rog-e-", dir="/tmp"))  # short: ControlPath limit
    settings = {
        "transport": {"ssh_config_file": str(ssh_config), "control_dir": str(control), "multiplex": "off"},
        "targets": [{"name": "leaky", "host": "leaky"}],
    }
    try:
        async with gateway_client(secrets=[SECRET], **settings) as (client, _):
            result = await client.call_tool("remote_exec", {"target": "leaky", "argv": ["true"]})
    finally:
        shutil.rmtree(control, ignore_errors=True)
    err = _error(result)
    assert err["code"] in {"connect_error", "transport_lost", "unknown_target", "auth_error"}
    wire = json.dumps(result.model_dump(mode="json", by_alias=True))
    assert "connecting with" in wire  # the stderr line did reach the details ...
    assert SECRET not in wire  # ... with the known secret ...
    assert "hunter2-Plain-Pattern" not in wire  # ... and the password= pattern scrubbed
    assert "[REDACTED]" in wire
