"""The approvals waiting for a human, and their decisions.

An :class:`Approval` is made when a rule-matched call arrives: it holds the :class:`ShownRequest` (and
its digest), the caller, an expiry (``approvals.timeout_s``) and, once decided, the decision, the
:class:`Approver` and the reason. :meth:`ApprovalHub.decide` refuses a decision that is not a human
operator's to make: the approval is gone (decided, expired), the page showed another request (its digest
differs), or the approver is the caller itself. A waiting call learns the decision through an event;
a retried call (the link fallback) finds its approval by caller and digest.

Ids are 128-bit random; the link alone decides nothing (the page needs an operator's session and a CSRF
token). Time is the injected monotonic ``clock``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import anyio
import structlog

from gateway.approvals.rules import ShownRequest
from gateway.auth.policy import Principal

__all__ = ["Approval", "ApprovalHub", "Approver", "Decision", "Refusal"]

_log = structlog.get_logger("gateway.approvals")

State = Literal["pending", "approved", "denied", "expired", "used"]
Decision = Literal["approve", "deny"]
Refusal = Literal["gone", "altered", "own_call"]
_KEEP_DECIDED = 200  # decided approvals kept for the console's list (the newest)


@dataclass(frozen=True)
class Approver:
    """A human operator, as the console authenticated them."""

    kind: Literal["token", "proxy"]
    subject: str

    @property
    def label(self) -> str:
        return f"{'operator' if self.kind == 'token' else 'proxy'}:{self.subject}"

    def is_caller(self, caller: Principal) -> bool:
        """The principal that made a call can never approve it: the same subject (any way of logging in)."""
        return self.subject.casefold() in {caller.subject.casefold(), caller.label.casefold()}

    def audit_fields(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "label": self.label}


@dataclass(eq=False)
class Approval:
    id: str
    shown: ShownRequest
    caller: Principal
    created: float  # monotonic
    expires: float  # monotonic
    created_at: str  # wall clock, for the human
    diff: str | None = None
    targets: tuple[str, ...] | None = None  # every target it acts on (a fleet selector's selection)
    state: State = "pending"
    approver: Approver | None = None
    reason: str = ""
    decided_at: str | None = None
    reported: bool = False  # a denial or expiry was told to the caller (its retry makes a fresh approval)
    decided: anyio.Event = field(default_factory=anyio.Event)

    def live(self, now: float) -> bool:
        return self.state in ("pending", "approved") and now < self.expires


class ApprovalHub:
    """Owns the approvals of this gateway process; ``base_url`` is where the pages are served."""

    def __init__(self, timeout_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._items: dict[str, Approval] = {}
        self._base_url: str | None = None
        self._opener: Callable[[], Awaitable[str]] | None = None
        self._listeners: list[Callable[[Approval], None]] = []
        self._states: dict[str, tuple[str, str]] = {}  # request_state -> (approval id, caller label)
        self.counters = {"requested": 0, "approved": 0, "denied": 0, "expired": 0, "refused": 0}

    # -- where the pages are ----------------------------------------------------------------------------
    def serve_at(self, base_url: str) -> None:
        self._base_url = base_url.rstrip("/")

    def open_with(self, opener: Callable[[], Awaitable[str]]) -> None:
        """stdio mode: ``opener`` starts the loopback listener on first need and returns its base URL."""
        self._opener = opener

    async def link(self, approval: Approval) -> str | None:
        if self._base_url is None and self._opener is not None:
            self._base_url = (await self._opener()).rstrip("/")
        return None if self._base_url is None else f"{self._base_url}/approvals/{approval.id}"

    # -- listeners (the console's live view) ------------------------------------------------------------
    def add_listener(self, listener: Callable[[Approval], None]) -> None:
        self._listeners.append(listener)

    def _changed_now(self, approval: Approval) -> None:
        for listener in self._listeners:
            listener(approval)

    # -- the calls' side --------------------------------------------------------------------------------
    def _sweep(self) -> None:
        now = self._clock()
        for approval in self._items.values():
            if approval.state in ("pending", "approved") and now >= approval.expires:
                approval.state = "expired"
                self.counters["expired"] += 1
                approval.decided.set()
                self._changed_now(approval)
        done = [a for a in self._items.values() if a.state not in ("pending", "approved")]
        for approval in done[: max(0, len(done) - _KEEP_DECIDED)]:
            self._items.pop(approval.id, None)

    def request(
        self,
        shown: ShownRequest,
        caller: Principal,
        diff: str | None = None,
        targets: tuple[str, ...] | None = None,
    ) -> Approval:
        """A fresh pending approval for ``shown`` (``targets``: what a fleet selector selects, shown too)."""
        self._sweep()
        now = self._clock()
        approval = Approval(
            id=secrets.token_urlsafe(16),
            shown=shown,
            caller=caller,
            created=now,
            expires=now + self._timeout_s,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            diff=diff,
            targets=targets,
        )
        self._items[approval.id] = approval
        self.counters["requested"] += 1
        _log.info("approval_pending", approval=approval.id, tool=shown.tool, target=shown.target)
        self._changed_now(approval)
        return approval

    def find(self, caller: Principal, digest: str) -> Approval | None:
        """This caller's approval of this very request: live (pending, approved) or decided against and
        not yet told (denied, expired); None when there is none."""
        self._sweep()
        for approval in self._items.values():
            if approval.caller.label != caller.label or approval.shown.digest != digest:
                continue
            if approval.state in ("pending", "approved") or (
                approval.state in ("denied", "expired") and not approval.reported
            ):
                return approval
        return None

    async def wait(
        self, approval: Approval, on_tick: Callable[[float], Awaitable[None]], interval_s: float
    ) -> State:
        """Wait for the decision, at most until the approval expires; ``on_tick(waited_s)`` every
        ``interval_s`` meanwhile (MCP progress). Returns the state it ended in."""
        while approval.state == "pending":
            left = approval.expires - self._clock()
            if left <= 0:
                break
            with anyio.move_on_after(min(interval_s, left)):
                await approval.decided.wait()
            if approval.state == "pending" and approval.expires > self._clock():
                await on_tick(self._clock() - approval.created)
        self._sweep()
        return approval.state

    def remaining_s(self, approval: Approval) -> float:
        """Seconds until ``approval`` expires (0 when it has)."""
        return max(0.0, approval.expires - self._clock())

    def use(self, approval: Approval) -> None:
        """The approved call runs now: the approval is used up."""
        approval.state = "used"
        self._changed_now(approval)

    def keep(self, approval: Approval) -> None:
        """The approved call stopped before anything ran (it needs a password from the one-time page
        first): its retry of the same request finds the approval still approved, until it expires."""
        if approval.state == "used" and approval.expires > self._clock():
            approval.state = "approved"
            self._changed_now(approval)

    def request_state(self, approval: Approval) -> str:
        """An opaque ``request_state`` for a 2026-07-28 ``InputRequiredResult`` naming ``approval``."""
        live = {a.id for a in self._items.values() if a.live(self._clock())}
        for key in [k for k, (aid, _) in self._states.items() if aid not in live]:
            del self._states[key]
        state = secrets.token_urlsafe(24)
        self._states[state] = (approval.id, approval.caller.label)
        return state

    def resume(self, state: str | None, caller: Principal) -> Approval | None:
        """The approval a retry's ``request_state`` names, when this hub issued it to this caller."""
        found = self._states.get(state or "")
        if found is None or found[1] != caller.label:
            return None
        return self._items.get(found[0])

    def withdraw(self, approval: Approval, reason: str) -> None:
        """The caller gave up (the client declined the link): a denial without an approver."""
        if approval.state == "pending":
            approval.state, approval.reason = "denied", reason
            approval.decided_at = datetime.now(UTC).isoformat(timespec="seconds")
            approval.decided.set()
            self._changed_now(approval)

    # -- the operators' side ----------------------------------------------------------------------------
    def get(self, approval_id: str) -> Approval | None:
        self._sweep()
        return self._items.get(approval_id)

    def pending(self) -> list[Approval]:
        self._sweep()
        return sorted((a for a in self._items.values() if a.state == "pending"), key=lambda a: a.created)

    def recent(self, limit: int = 20) -> list[Approval]:
        self._sweep()
        done = [a for a in self._items.values() if a.state != "pending"]
        return sorted(done, key=lambda a: a.created, reverse=True)[:limit]

    def decide(
        self, approval: Approval, approver: Approver, decision: Decision, reason: str, shown_digest: str
    ) -> Refusal | None:
        """Record a human's decision; the refusal's kind (nothing changed) when it is not theirs to make.

        No ``await`` between the checks and the change: two operators deciding at once cannot both win."""
        self._sweep()
        refusal: Refusal | None = None
        if approval.state != "pending" or not approval.live(self._clock()):
            refusal = "gone"
        elif not secrets.compare_digest(shown_digest.encode(), approval.shown.digest.encode()):
            refusal = "altered"  # the page showed another request than the one waiting
        elif approver.is_caller(approval.caller):
            refusal = "own_call"
        if refusal is not None:
            self.counters["refused"] += 1
            _log.warning("approval_refused", approval=approval.id, approver=approver.label, why=refusal)
            return refusal
        approval.state = "approved" if decision == "approve" else "denied"
        approval.approver, approval.reason = approver, reason
        approval.decided_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.counters["approved" if decision == "approve" else "denied"] += 1
        approval.decided.set()
        self._changed_now(approval)
        return None
