"""Routing an upstream's elicitation/create to the one relayed call that can answer it.

The SDK's `Client` takes one elicitation callback per connection, and the request reaching it
names no tools/call. So a question is routed only when that cannot be a guess: exactly one
relayed call is in flight on the connection, no abandoned call (cancelled or timed out while the
upstream may still run it) could have asked it, and that call brought a callback. Anything else
is answered with an error — never sent to a caller who might not be the one asked, because the
question (and the answer) may carry another principal's data.

Answers come from a human: they are returned to the upstream and never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import mcp_types as types
from mcp.client.session import ClientRequestContext

__all__ = ["ElicitCallback", "ElicitRouter", "RoutedCall"]

logger = logging.getLogger("upstream")

ElicitCallback = Callable[[types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]
"""Answers one elicitation for one relayed call: the params arrive unchanged (form or URL mode)."""


@dataclass(eq=False)
class RoutedCall:
    """One relayed tools/call in flight on one connection."""

    seq: int
    elicit: ElicitCallback | None
    deadline: float
    ended: bool = False
    scopes: set[anyio.CancelScope] = field(default_factory=set)


def _refuse(message: str, code: int = types.INVALID_REQUEST) -> types.ErrorData:
    return types.ErrorData(code=code, message=message)


class ElicitRouter:
    """The elicitation callback of one connection generation, and the calls it may route to."""

    def __init__(self, *, upstream: str, timeout_s: float) -> None:
        self._upstream = upstream
        self._timeout_s = timeout_s
        self._calls: dict[int, RoutedCall] = {}
        self._seq = 0
        self._tainted_until = 0
        """Calls up to this sequence number were issued before an abandonment: until one issued
        later is answered, a late question from the abandoned call could still arrive."""

    def enter(self, elicit: ElicitCallback | None, *, deadline: float) -> RoutedCall:
        self._seq += 1
        call = RoutedCall(seq=self._seq, elicit=elicit, deadline=deadline)
        self._calls[call.seq] = call
        return call

    def leave(self, call: RoutedCall, *, answered: bool) -> None:
        """The call is over; `answered` is False when it was cancelled or timed out unanswered."""
        call.ended = True
        self._calls.pop(call.seq, None)
        for scope in call.scopes:
            scope.cancel()  # a question still waiting for this caller's answer is withdrawn
        if not answered:
            self._tainted_until = self._seq
        elif call.seq > self._tainted_until:
            self._tainted_until = 0

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        calls = list(self._calls.values())
        if len(calls) != 1 or self._tainted_until:
            n = len(calls) + (1 if self._tainted_until else 0)
            logger.info("upstream %r: elicitation declined: %d calls in flight", self._upstream, n)
            return _refuse(f"elicitation cannot be routed: {n} calls in flight")
        call = calls[0]
        if call.elicit is None:
            return _refuse("the calling client cannot answer elicitation")
        limit = min(self._timeout_s, call.deadline - anyio.current_time())
        answer: types.ElicitResult | types.ErrorData | None = None
        with anyio.move_on_after(max(0.0, limit)) as scope:
            call.scopes.add(scope)
            try:
                answer = await call.elicit(params)
            except Exception as exc:  # boundary: a failed relay is a refusal, never a crash of the client
                logger.info("upstream %r: elicitation relay failed: %s", self._upstream, type(exc).__name__)
                return _refuse("the calling client could not answer elicitation", types.INTERNAL_ERROR)
            finally:
                call.scopes.discard(scope)
        if answer is not None:
            return answer
        if call.ended:
            return _refuse("the call that was asked has ended")
        return _refuse(f"no answer to elicitation within {limit:.0f}s", types.REQUEST_TIMEOUT)
