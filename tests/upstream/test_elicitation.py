"""An upstream's elicitation is answered by the one relayed call it can be attributed to, or refused.

End to end against the real fault upstream (its ``ask`` tool returns what its question got back), and
the attribution rules on `ElicitRouter` itself, in memory (abandoned calls, withdrawn questions).
"""

from __future__ import annotations

from typing import Any, cast

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext

from tests.upstream.conftest import FaultServer
from upstream import Upstream
from upstream._elicit import ElicitRouter

pytestmark = pytest.mark.anyio

FORM = types.ElicitRequestFormParams(
    message="Which colour?", requested_schema={"type": "object", "properties": {"colour": {"type": "string"}}}
)
CONTEXT = ClientRequestContext(session=cast(Any, None), request_id=1)  # the router never reads it


async def accept(params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
    return types.ElicitResult(action="accept", content={"colour": "teal"})


def content(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_a_question_during_a_call_is_answered_by_that_calls_callback(fault_http: FaultServer) -> None:
    seen: list[types.ElicitRequestParams] = []

    async def answer(params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        seen.append(params)
        return await accept(params)

    async with Upstream(fault_http.settings()) as up:
        with anyio.fail_after(20):
            result = await up.call_tool("ask", {"mode": "form"}, elicit=answer)
            refused = await up.call_tool("ask", {"mode": "form"})  # no callback: the upstream hears no
    assert content(result) == {"action": "accept", "content": {"colour": "teal"}}
    assert [type(p) for p in seen] == [types.ElicitRequestFormParams]
    assert content(refused)["error"]["code"] == types.INVALID_REQUEST


async def test_an_unanswered_question_is_refused_after_the_elicitation_timeout_and_the_call_completes(
    fault_http: FaultServer,
) -> None:
    never = anyio.Event()

    async def silent(params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        await never.wait()
        raise AssertionError("unreachable")  # pragma: no cover

    async with Upstream(fault_http.settings(elicitation_timeout_s=0.3)) as up:
        with anyio.fail_after(20):
            result = await up.call_tool("ask", {"mode": "form"}, elicit=silent)
    assert content(result)["error"]["code"] == types.REQUEST_TIMEOUT


async def test_after_an_abandoned_call_questions_are_refused_until_a_later_call_is_answered() -> None:
    router = ElicitRouter(upstream="u", timeout_s=5)
    abandoned = router.enter(accept, deadline=anyio.current_time() + 60)
    router.leave(abandoned, answered=False)  # cancelled: the upstream may still ask on its behalf

    later = router.enter(accept, deadline=anyio.current_time() + 60)
    with anyio.fail_after(5):
        tainted = await router(CONTEXT, FORM)
    router.leave(later, answered=True)  # an answer to a call sent after the abandonment

    clean = router.enter(accept, deadline=anyio.current_time() + 60)
    with anyio.fail_after(5):
        routed = await router(CONTEXT, FORM)
    router.leave(clean, answered=True)

    assert isinstance(tainted, types.ErrorData)
    assert tainted.code == types.INVALID_REQUEST
    assert isinstance(routed, types.ElicitResult)
    assert routed.action == "accept"


async def test_no_call_in_flight_means_no_one_is_asked() -> None:
    router = ElicitRouter(upstream="u", timeout_s=5)
    with anyio.fail_after(5):
        answer = await router(CONTEXT, FORM)
    assert isinstance(answer, types.ErrorData)
    assert answer.code == types.INVALID_REQUEST


async def test_a_question_pending_when_its_call_ends_is_withdrawn() -> None:
    router = ElicitRouter(upstream="u", timeout_s=60)
    asked = anyio.Event()
    answers: list[types.ElicitResult | types.ErrorData] = []

    async def pending(params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        asked.set()
        await anyio.Event().wait()  # the human never answers
        raise AssertionError("unreachable")  # pragma: no cover

    call = router.enter(pending, deadline=anyio.current_time() + 60)

    async def ask() -> None:
        answers.append(await router(CONTEXT, FORM))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await asked.wait()
            router.leave(call, answered=False)  # the caller cancelled its call
    assert len(answers) == 1
    assert isinstance(answers[0], types.ErrorData)
    assert answers[0].code == types.INVALID_REQUEST


async def test_a_callback_that_fails_becomes_an_internal_error_answer() -> None:
    router = ElicitRouter(upstream="u", timeout_s=5)

    async def broken(params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        raise RuntimeError("client went away")

    call = router.enter(broken, deadline=anyio.current_time() + 60)
    with anyio.fail_after(5):
        answer = await router(CONTEXT, FORM)
    router.leave(call, answered=True)
    assert isinstance(answer, types.ErrorData)
    assert answer.code == types.INTERNAL_ERROR
