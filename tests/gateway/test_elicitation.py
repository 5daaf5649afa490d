"""Issue #4: an upstream's elicitation reaches the calling client "where the connection allows it".

Real processes: the fault upstream (``ask`` elicits from its client and returns what came back) over
streamable HTTP, the gateway in-process behind a real MCP client. A question is only ever put to the
client when it can be attributed to that client's call; otherwise the upstream is told no (its ``ask``
result then carries the refusal) and the call still completes. Every wait is bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext, ElicitationFnT

from gateway._redact import Redactor
from gateway._runtime import Runtime
from gateway.config import Settings
from gateway.serving.server import build_server
from gateway.tools import all_specs
from tests.gateway.test_relay import Inbox, entry, wait_listed
from tests.upstream.conftest import FaultServer

pytestmark = pytest.mark.anyio

ANSWER = {"colour": "teal"}


class Human:
    """The calling client's elicitation callback: records each question and accepts it."""

    def __init__(self) -> None:
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.asked.append(params)
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content=ANSWER)


@asynccontextmanager
async def gateway_client(
    tmp_path: Path,
    fault: FaultServer,
    *,
    mode: str = "legacy",
    elicitation_callback: ElicitationFnT | None = None,
) -> AsyncIterator[Client]:
    """The gateway in-process relaying ``fault``, and one client on it (listing done)."""
    cfg = Settings.model_validate({"state_dir": str(tmp_path / "state"), "upstreams": [entry(fault)]})
    inbox = Inbox()
    async with Runtime(cfg, all_specs(), redactor=Redactor(())) as rt:
        server = build_server(rt, stdio_principal="test")
        if mode != "legacy":  # the stateless era hears no list_changed: let a legacy client wait for the list
            async with Client(server, mode="legacy", cache=None, message_handler=inbox) as first:
                with anyio.fail_after(30):
                    await wait_listed(first, inbox, {"ask", "slow"})
        async with Client(
            server,
            mode=mode,  # type: ignore[arg-type]
            cache=None,
            message_handler=inbox,
            elicitation_callback=elicitation_callback,
        ) as client:
            if mode == "legacy":
                with anyio.fail_after(30):
                    await wait_listed(client, inbox, {"ask", "slow"})
            yield client


def asked(result: types.CallToolResult) -> dict[str, Any]:
    """What the upstream's ``ask`` got back from the gateway: an answer or a refusal."""
    assert result.is_error is not True, result
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_the_calling_clients_answer_to_an_upstream_question_reaches_the_upstream(
    tmp_path: Path, fault: FaultServer
) -> None:
    human = Human()
    async with gateway_client(tmp_path, fault, elicitation_callback=human) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("ask", {"mode": "form"})
    assert asked(result) == {"action": "accept", "content": ANSWER}
    assert len(human.asked) == 1
    question = human.asked[0]
    assert isinstance(question, types.ElicitRequestFormParams)
    assert question.message == "Which colour?"
    assert question.requested_schema["properties"] == {"colour": {"type": "string"}}


async def test_a_url_mode_question_is_passed_to_the_client_unchanged(
    tmp_path: Path, fault: FaultServer
) -> None:
    human = Human()
    async with gateway_client(tmp_path, fault, elicitation_callback=human) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("ask", {"mode": "url"})
    assert asked(result) == {"action": "accept", "content": None}
    assert len(human.asked) == 1
    question = human.asked[0]
    assert isinstance(question, types.ElicitRequestURLParams)
    assert (question.url, question.elicitation_id) == ("https://example.invalid/enter", "ask-1")


async def test_a_client_without_elicitation_capability_leaves_the_upstream_a_refusal_and_the_call_completes(
    tmp_path: Path, fault: FaultServer
) -> None:
    async with gateway_client(tmp_path, fault) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("ask", {"mode": "form"})
            after = await client.call_tool("echo", {"text": "still here"})
    refusal = asked(result)["error"]
    assert refusal["code"] == types.INVALID_REQUEST
    assert after.structured_content == {"text": "still here"}


async def test_a_question_while_two_relayed_calls_are_in_flight_is_refused_and_never_reaches_a_client(
    tmp_path: Path, fault: FaultServer
) -> None:
    human = Human()
    async with gateway_client(tmp_path, fault, elicitation_callback=human) as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                held: list[types.CallToolResult] = []

                async def hold() -> None:
                    held.append(await client.call_tool("slow", {"call_id": "held"}))

                tg.start_soon(hold)
                started = await fault.control("GET", "/control/started", call_id="held")
                assert started.status_code == 200  # "slow" is running upstream: two calls in flight
                result = await client.call_tool("ask", {"mode": "form"})
                await fault.control("POST", "/control/release")
    refusal = asked(result)["error"]
    assert refusal["code"] == types.INVALID_REQUEST
    assert human.asked == []
    assert held[0].is_error is not True


async def test_a_stateless_2026_era_client_cannot_be_asked_so_the_upstream_sees_a_refusal(
    tmp_path: Path, fault: FaultServer
) -> None:
    human = Human()
    async with gateway_client(tmp_path, fault, mode="2026-07-28", elicitation_callback=human) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("ask", {"mode": "form"})
    refusal = asked(result)["error"]
    assert refusal["code"] == types.INVALID_REQUEST
    assert human.asked == []
