"""The gate in the dispatch path: a rule-matched call waits for a human's decision before it runs.

:func:`await_approval` runs after the policy and argument checks and before the tool. When no rule
matches it returns at once. Otherwise the call's :class:`~gateway.approvals.rules.ShownRequest` is
hashed and an approval opened (or the caller's earlier one for the very same request found), and the
human is reached:

* URL elicitation when the calling client declared it: the client shows the approval page's link; the
  call waits (bounded by ``approvals.timeout_s``), sending MCP progress every
  ``approvals.progress_interval_s``; the elicitation is completed once decided;
* on 2026-07-28 (no server-to-client requests), a client that declared URL elicitation gets an
  ``InputRequiredResult`` with the link; its retry names the approval (``request_state``) and waits for
  the decision; a retry that is not the request shown is ``approval_altered``;
* otherwise (unless ``approvals.wait_without_elicitation``) the call fails at once with ``policy_denied``,
  ``details.reason = "approval_required"`` and the link (retryable): the human decides on the page or
  in the console, and the caller's retry of the same request (same digest) finds the decision;
* the console's pending list shows every waiting approval either way.

Denied → ``policy_denied`` with ``details.reason = "approval_denied"`` and the approver's reason;
expired → ``approval_timeout``. Approved → the arguments about to run are hashed again and compared with
what was shown (``approval_altered`` otherwise); the approval is used once. The call's audit record gets
``facts.approval`` (rule, digest, approver, reason, waited).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
import structlog
from pydantic import ValidationError

from gateway._errors import ErrorCode, ToolFailure
from gateway._runtime import Runtime
from gateway.approvals.diff import change_diff
from gateway.approvals.hub import Approval
from gateway.approvals.rules import ShownRequest, matching_rule
from gateway.auth.policy import Principal
from gateway.config import ApprovalRule
from gateway.secrets.broker import UrlElicitor
from remoteops import RemoteOpsError, Selector, resolve_selector
from upstream import ProgressCallback

__all__ = ["APPROVAL_KEY", "ApprovalInputRequired", "approval_resume", "await_approval", "needs_approval"]

APPROVAL_KEY = "rog_approval_page"
"""The key of the approval page's URL elicitation in an ``InputRequiredResult`` (2026-07-28)."""


class ApprovalInputRequired(Exception):
    """2026-07-28, a client that declared URL elicitation: the dispatcher answers with an
    ``InputRequiredResult`` showing ``url``; the client's retry (``request_state``) waits for the decision."""

    def __init__(self, approval: Approval, url: str, message: str, request_state: str) -> None:
        super().__init__(message)
        self.approval, self.url, self.message, self.request_state = approval, url, message, request_state


_log = structlog.get_logger("gateway.approvals")
_COMPLETE_S = 5.0


def _summary(shown: ShownRequest) -> str:
    args = shown.arguments
    what = args.get("argv") or args.get("shell") or args.get("path") or args.get("remote_path") or ""
    where = f" on {shown.target}" if shown.target else ""
    return f"{shown.tool}{where}: {what}" if what else f"{shown.tool}{where}"


def _failure(approval: Approval, reason: str, message: str, **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorCode.POLICY_DENIED,
        message,
        retryable=reason == "approval_required",
        details={
            "reason": reason,
            "approval_id": approval.id,
            "rule": approval.shown.rule,
            "tool": approval.shown.tool,
            "target": approval.shown.target,
            **details,
        },
    )


def _facts(approval: Approval, facts: dict[str, Any], *, waited_s: float) -> None:
    facts["approval"] = {
        "id": approval.id,
        "rule": approval.shown.rule,
        "digest": approval.shown.digest,
        "state": approval.state,
        "approver": approval.approver.audit_fields() if approval.approver else None,
        "reason": approval.reason,
        "waited_s": round(waited_s, 3),
    }


async def _ask(elicitor: UrlElicitor, approval: Approval, url: str) -> tuple[str | None, str]:
    """The URL elicitation; returns (its id when the client accepted showing the link, the action)."""
    elicitation_id = secrets.token_hex(16)
    message = (
        f"A human operator must approve {_summary(approval.shown)} (asked by {approval.caller.label}): "
        f"open the approval page; the call waits for the decision."
    )
    answer = await elicitor.ask(message, url, elicitation_id)
    action = getattr(answer, "action", None)
    if action == "accept":
        return elicitation_id, "accept"
    if action in ("decline", "cancel"):
        return None, str(action)
    return None, "unsupported"


_SELECTOR_KEYS = ("group", "labels", "targets")


def call_targets(rt: Runtime, target: str | None, arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Every target the call acts on: its ``target``, or what its fleet selector (``group``, ``labels``,
    ``targets``) selects in the configuration; None when that is not known before it runs."""
    if target is not None:
        return (target,)
    if not any(arguments.get(key) is not None for key in _SELECTOR_KEYS):
        return None
    try:
        selector = Selector.model_validate({key: arguments.get(key) for key in _SELECTOR_KEYS})
        resolution = resolve_selector(selector, rt.settings.targets, rt.settings.groups)
    except (ValidationError, RemoteOpsError):
        return None  # the tool refuses it; a rule naming targets matches meanwhile (fail closed)
    return resolution.selected


def needs_approval(rt: Runtime, who: Principal, toolset: str, call: types.CallToolRequestParams) -> bool:
    """Whether a rule matches ``call``: a path that would run it without the dispatcher (an MCP task started
    on the target directly) must leave it to the dispatcher, whose gate asks the human."""
    arguments = dict(call.arguments or {})
    target = arguments.get("target") if isinstance(arguments.get("target"), str) else None
    return _rule_for(rt, who, call.name, toolset, target, arguments) is not None


def _rule_for(
    rt: Runtime, who: Principal, tool: str, toolset: str, target: str | None, arguments: Mapping[str, Any]
) -> tuple[int, ApprovalRule, tuple[str, ...] | None] | None:
    rules = rt.settings.approvals.rules
    if not rules:
        return None
    targets = call_targets(rt, target, arguments)
    found = matching_rule(rules, who, tool=tool, toolset=toolset, targets=targets, arguments=arguments)
    return None if found is None else (*found, targets)


def approval_resume(
    rt: Runtime, params: types.CallToolRequestParams, principal: Principal
) -> tuple[Approval, str] | None:
    """The approval a 2026-07-28 retry names (its ``request_state``), and the human's answer to its link."""
    answer = (params.input_responses or {}).get(APPROVAL_KEY)
    if params.request_state is None or not isinstance(answer, types.ElicitResult):
        return None
    approval = rt.approvals.resume(params.request_state, principal)
    return None if approval is None else (approval, answer.action)


async def _reach(
    rt: Runtime,
    approval: Approval,
    fresh: bool,
    elicitor: UrlElicitor | None,
    report_progress: ProgressCallback | None,
    facts: dict[str, Any],
    started: float,
    *,
    resumed: bool = False,
    input_required: bool = False,
) -> str | None:
    """Reach the human (URL elicitation, an ``InputRequiredResult``, else the link in an
    ``approval_required`` failure) and wait for the decision when the call may (``resumed``: a 2026-07-28
    retry whose client showed the link waits); returns the elicitation's id when there was one."""
    cfg, hub, shown = rt.settings.approvals, rt.approvals, approval.shown
    url = await hub.link(approval)
    if fresh:  # where the operator finds it (also for a stdio gateway, whose console opens on first need)
        _log.info("approval_link", approval=approval.id, url=url, tool=shown.tool, target=shown.target)
    elicitation_id: str | None = None
    if approval.state != "pending":
        return None
    if fresh and elicitor is not None and url is not None:
        action = "unanswered"
        with anyio.move_on_after(hub.remaining_s(approval)):  # a client that never answers holds nothing
            elicitation_id, action = await _ask(elicitor, approval, url)
        if action in ("decline", "cancel"):
            hub.withdraw(approval, f"the client's user answered {action} to the approval link")
    waits = resumed or cfg.wait_without_elicitation
    if elicitation_id is None and approval.state == "pending" and input_required and url and not resumed:
        _facts(approval, facts, waited_s=time.monotonic() - started)
        message = (
            f"A human operator must approve {_summary(shown)} (asked by {approval.caller.label}): open the "
            "approval page; this call is retried and waits for the decision."
        )
        raise ApprovalInputRequired(approval, url, message, hub.request_state(approval))
    if elicitation_id is None and approval.state == "pending" and not waits:
        _facts(approval, facts, waited_s=time.monotonic() - started)
        raise _failure(
            approval,
            "approval_required",
            f"{_summary(shown)} needs a human operator's approval (rule {shown.rule!r}): the operator "
            f"approves or denies it at {url or 'the console'} (valid {hub.remaining_s(approval):.0f} s); "
            "then retry this exact call. A changed call needs its own approval.",
            approval_url=url,
            expires_s=round(hub.remaining_s(approval), 1),
            retry_after=cfg.progress_interval_s,
        )

    async def tick(waited_s: float) -> None:
        if report_progress is not None:
            await report_progress(waited_s, cfg.timeout_s, f"waiting for a human's approval at {url}")

    await hub.wait(approval, tick, cfg.progress_interval_s)
    return elicitation_id


async def await_approval(
    rt: Runtime,
    *,
    principal: Principal,
    tool: str,
    toolset: str,
    target: str | None,
    arguments: Mapping[str, Any],
    elicitor: UrlElicitor | None,
    report_progress: ProgressCallback | None,
    facts: dict[str, Any],
    input_required: bool = False,
    resume: tuple[Approval, str] | None = None,
) -> Approval | None:
    """Return when the call may run (no rule matches: None; or a human approved exactly this request: the
    used approval); raise ``policy_denied`` otherwise (see the module docstring). ``input_required``: a
    2026-07-28 client that declared URL elicitation; ``resume``: the approval its retry's
    ``request_state`` names, and the human's answer to the link."""
    cfg = rt.settings.approvals
    found = _rule_for(rt, principal, tool, toolset, target, arguments)
    if found is None:
        return None
    index, rule, targets = found
    shown = ShownRequest.of(
        tool=tool,
        toolset=toolset,
        target=target,
        principal=principal.label,
        arguments=arguments,
        rule=rule.name or f"rule {index + 1}",
    )
    hub = rt.approvals
    started = time.monotonic()
    if resume is not None and resume[0].state == "used":
        resume = None  # that approval ran already: this is a new request
    if resume is not None:
        approval, action = resume
        if approval.shown.digest != shown.digest:
            raise _failure(
                approval,
                "approval_altered",
                f"{_summary(shown)}: this retry is not the request the approval page showed; nothing ran",
            )
        if action != "accept":
            hub.withdraw(approval, f"the client's user answered {action} to the approval link")
        fresh = False
    else:
        found_approval = hub.find(principal, shown.digest)
        fresh = found_approval is None
        if found_approval is None:
            diff = await change_diff(rt.remote, tool, arguments) if target is not None else None
            found_approval = hub.request(shown, principal, diff, targets if target is None else None)
        approval = found_approval
    try:
        elicitation_id = await _reach(
            rt,
            approval,
            fresh,
            elicitor,
            report_progress,
            facts,
            started,
            resumed=resume is not None,
            input_required=input_required,
        )
    except anyio.get_cancelled_exc_class():
        hub.withdraw(approval, "the call was cancelled while it waited")  # off the pending list
        raise
    if elicitation_id is not None and elicitor is not None:
        with anyio.move_on_after(_COMPLETE_S):
            try:
                await elicitor.complete(elicitation_id)
            except Exception as exc:  # advisory: the call goes on
                _log.debug("elicitation_complete_not_sent", error=type(exc).__name__)
    waited = time.monotonic() - started
    _facts(approval, facts, waited_s=waited)
    if approval.state in ("denied", "expired"):
        approval.reported = True
    if approval.state == "denied":
        who = approval.approver.label if approval.approver else "the client"
        raise _failure(
            approval,
            "approval_denied",
            f"{_summary(shown)} was denied by {who}" + (f": {approval.reason}" if approval.reason else ""),
            approver=approval.approver.label if approval.approver else None,
            reason_text=approval.reason,
        )
    if approval.state == "used":  # an identical call waited on the same approval and ran with it
        raise _failure(
            approval,
            "approval_required",
            f"{_summary(shown)}: its approval was used by an identical call that ran; this one needs its own "
            "(retry it to ask again); nothing ran",
        )
    if approval.state != "approved":
        raise _failure(
            approval,
            "approval_timeout",
            f"{_summary(shown)} was not approved within {cfg.timeout_s:g} s; nothing ran",
            timeout_s=cfg.timeout_s,
        )
    hub.use(approval)
    facts["approval"]["state"] = "used"
    if not shown.still(arguments):
        raise _failure(
            approval,
            "approval_altered",
            f"{_summary(shown)}: the request changed after it was shown to the approver; nothing ran",
        )
    return approval
