"""``remote_root_exec`` [root]: ``remote_exec`` as root, on the targets of the root allow-list only.

A target outside ``root.targets`` is ``policy_denied`` before anything is resolved or connected. The
privilege choice point is remoteops' (``privilege="root"``); a password a provider needs comes from the
runtime's :class:`~gateway.secrets.broker.SecretBroker` (one-time page, URL elicitation, askpass), never
from the arguments. The audit record's ``facts.privilege`` lists every provider attempted and which ran.
"""

from __future__ import annotations

from gateway._catalog import Toolset
from gateway._context import ToolContext
from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import audit_privilege, privilege_failure_audited
from gateway.tools._registry import CHANGE, ToolGroup
from gateway.tools.remote import ExecIn, render_exec
from remoteops import ExecResult

__all__ = ["SPECS"]

_tools = ToolGroup(CHANGE)
SPECS = _tools.specs


class RootExecIn(ExecIn):
    """The same arguments as ``remote_exec``."""


def _render(out: ExecResult) -> str:
    text = render_exec(out)
    if out.privilege is not None:
        text += f"\n[as root via {out.privilege.provider}]"
    return text


@_tools.tool(
    "remote_root_exec",
    "Run a command as root on a target",
    "remote_exec as root, only on targets in the operator's root allow-list: the operator's providers "
    "(direct_root, sudo_nopasswd, docker_host_root, sudo_password, su_password) are tried in order; the "
    "result's privilege lists every attempt. A password is never an argument: a human enters it on a "
    "one-time page (the link comes by URL elicitation, or in the privilege_error message: retry after it "
    "was entered).",
    toolset=Toolset.ROOT,
    render=_render,
)
async def remote_root_exec(ctx: ToolContext, args: RootExecIn) -> ExecResult:
    settings = ctx.runtime.settings
    if args.target not in settings.root.targets:
        raise ToolFailure(
            ErrorCode.POLICY_DENIED,
            f"target {args.target!r} is not in the root allow-list (root.targets); nothing was connected",
            details={"target": args.target, "reason": "not_root_allowed"},
        )
    source = ctx.runtime.secrets.source(ctx.principal, ctx.elicitor, ctx.resume)
    with privilege_failure_audited(ctx):
        result = await ctx.runtime.remote.run(
            args.target,
            args.argv,
            args.shell,
            stdin=args.stdin_bytes(),
            cwd=args.cwd,
            env=args.env,
            timeout_s=args.timeout_s,
            privilege="root",
            secrets=source,
        )
    audit_privilege(ctx, result.privilege)
    return result
