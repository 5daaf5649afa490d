"""Interactive sessions on a target's tmux: thin adapters over :class:`remoteops.RemoteSessions`."""

from __future__ import annotations

from pydantic import Field

from gateway._context import ToolContext
from gateway.tools._base import Input, Output, TargetName
from gateway.tools._registry import CHANGE, READ, TEARDOWN, ToolGroup
from remoteops import (
    KeyName,
    SendMode,
    SessionCloseResult,
    SessionEnsureResult,
    SessionInfo,
    SessionName,
    SessionRead,
    SessionSendResult,
    SessionState,
    SessionView,
    SessionWaitResult,
    check_time_limit,
)

__all__ = ["SPECS"]

_tools = ToolGroup(READ)
SPECS = _tools.specs


class SessionIn(Input):
    target: TargetName
    name: SessionName


class SessionEnsureIn(SessionIn):
    cwd: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Working directory of the shell when the session is created (ignored on reattach).",
    )


class SessionSendIn(SessionIn):
    text: str | None = Field(
        None,
        description="Text to type, delivered exactly (never interpreted as key names). Multi-line text is "
        "pasted intact through a tmux buffer. Audited only as {len, sha256_prefix}.",
    )
    mode: SendMode = Field(
        "auto",
        description="auto: paste when the text has a newline, else literal; literal: the exact bytes as "
        "if typed; paste: a bracketed paste when the program asked for it, each newline as Enter.",
    )
    keys: list[KeyName] = Field(
        default_factory=list, max_length=64, description="Named keys pressed after the text, in order."
    )
    enter: bool = Field(False, description="Press Enter after the text and keys.")


class SessionReadIn(SessionIn):
    view: SessionView = Field(
        "stream",
        description="stream: output bytes by cursor (since → next_offset); screen: the visible pane; "
        "scrollback: the last `lines` lines of history and screen.",
    )
    since: int | None = Field(None, ge=0, description="stream: byte offset to read from (default 0).")
    max_bytes: int | None = Field(
        None, ge=4, description="At most this many bytes (default and ceiling: sessions.read_max_bytes)."
    )
    lines: int | None = Field(None, ge=1, le=1_000_000, description="scrollback: how many lines back.")
    ansi: bool = Field(False, description="Keep terminal escape sequences (default: stripped).")


class SessionWaitIn(SessionIn):
    pattern: str = Field(
        min_length=1,
        max_length=1000,
        description="POSIX extended regex (grep -E) matched per line of new output, escapes stripped; the "
        "unfinished last line (a prompt without newline) counts.",
    )
    since: int | None = Field(
        None,
        ge=0,
        description="Match output from this stream offset (e.g. session_send's cursor_before); default: "
        "output after the call.",
    )
    timeout_s: float | None = Field(
        None, ge=0, description="Wait at most this long (default sessions.wait_default_s, 30 s)."
    )


class SessionListIn(Input):
    target: TargetName | None = None
    state: SessionState | None = None
    limit: int | None = Field(None, ge=1, description="At most this many (ceiling sessions.list_max).")


class SessionListOut(Output):
    sessions: list[SessionInfo]
    total: int = Field(description="How many sessions matched the filters (the list may be shorter).")
    truncated: bool


def _render_info(out: SessionInfo) -> str:
    return f"session {out.name} on {out.target}: {out.state} ({out.width}x{out.height})"


def _render_ensure(out: SessionEnsureResult) -> str:
    adopted = " (adopted)" if out.adopted else ""
    return f"session {out.name} on {out.target}: {out.outcome}{adopted}; stream at {out.output_bytes} bytes"


def _render_send(out: SessionSendResult) -> str:  # never the text itself
    keys = " ".join(out.keys) or "no keys"
    sent = f"sent {out.sent_bytes} bytes ({out.mode}) and {keys} to {out.name}"
    return f"{sent}; cursor_before {out.cursor_before}"


def _render_read(out: SessionRead) -> str:
    if out.view == "stream":
        head = f"{out.returned_bytes} bytes from {out.offset}; next_offset {out.next_offset} ({out.state})"
    else:
        head = f"{out.view} of {out.name} ({out.width}x{out.height}, cursor {out.cursor_x},{out.cursor_y})"
    return f"{head}\n{out.data}"


def _render_wait(out: SessionWaitResult) -> str:
    extra = f": {(out.line or '')[:200]}" if out.outcome == "matched" else ""
    return f"session {out.name}: {out.outcome}{extra} after {out.waited_ms:.0f} ms; cursor {out.cursor}"


def _render_list(out: SessionListOut) -> str:
    lines = [_render_info(s) for s in out.sessions]
    if out.truncated:
        lines.append(f"... {out.total - len(out.sessions)} more")
    return "\n".join(lines) or "no sessions"


def _render_close(out: SessionCloseResult) -> str:
    return f"session {out.name} on {out.target}: {out.outcome}; directory removed: {out.directory_removed}"


@_tools.tool(
    "session_ensure",
    "Ensure an interactive session",
    "The named interactive shell session on a target (tmux on a gateway-owned socket, fixed size): "
    "reattached when it is alive, created only once the target proved it absent. Survives SSH drops and "
    "gateway restarts; returns created or reattached and the output stream's size.",
    kind=CHANGE,
    render=_render_ensure,
    destructive=False,
    idempotent=True,
)
async def session_ensure(ctx: ToolContext, args: SessionEnsureIn) -> SessionEnsureResult:
    return await ctx.runtime.sessions.ensure(args.target, args.name, cwd=args.cwd)


@_tools.tool(
    "session_send",
    "Send text and keys to a session",
    "Type text (exact, or pasted intact through a tmux buffer when multi-line), then named keys (Enter, "
    "Tab, Escape, arrows, C-c, C-d, C-z, ...) and optionally Enter. Returns cursor_before for "
    "session_wait_for. The text is audited only as a digest.",
    kind=CHANGE,
    render=_render_send,
)
async def session_send(ctx: ToolContext, args: SessionSendIn) -> SessionSendResult:
    return await ctx.runtime.sessions.send(
        args.target, args.name, args.text, keys=args.keys, enter=args.enter, mode=args.mode
    )


@_tools.tool(
    "session_read",
    "Read a session",
    "The output stream by cursor (since → next_offset; never skips or repeats a byte), the visible screen "
    "or the scrollback; bounded; terminal escapes stripped unless ansi.",
    render=_render_read,
)
async def session_read(ctx: ToolContext, args: SessionReadIn) -> SessionRead:
    return await ctx.runtime.sessions.read(
        args.target,
        args.name,
        view=args.view,
        since=args.since,
        max_bytes=args.max_bytes,
        lines=args.lines,
        ansi=args.ansi,
    )


@_tools.tool(
    "session_wait_for",
    "Wait for session output",
    "Block on the target until a regex matches a line of new output (the unfinished last line too, such "
    "as a prompt), the session ends or the timeout passes; outcome matched (with the text and a cursor), "
    "timeout or session_exited.",
    render=_render_wait,
)
async def session_wait_for(ctx: ToolContext, args: SessionWaitIn) -> SessionWaitResult:
    if args.timeout_s is not None:  # refused before the session is looked up (remoteops checks it again)
        check_time_limit(args.timeout_s, ctx.runtime.settings.sessions.wait_max_s, zero_ok=True)
    # a pattern that is not one line: remoteops' InvalidRequest

    async def progress(size: int) -> None:
        await ctx.report_progress(float(size), None, f"{size} bytes of output so far")

    return await ctx.runtime.sessions.wait_for(
        args.target,
        args.name,
        args.pattern,
        since=args.since,
        timeout_s=args.timeout_s,
        progress=progress,
    )


@_tools.tool(
    "session_list",
    "List sessions",
    "Known interactive sessions, newest first, filterable by target and state; states as last seen "
    "(checked on the target after a restart and by every call on a session).",
    render=_render_list,
    open_world=False,
)
async def session_list(ctx: ToolContext, args: SessionListIn) -> SessionListOut:
    among = ctx.policy.targets(ctx.identity)  # a caller restricted to some targets sees only theirs
    found, total = ctx.runtime.sessions.list_sessions(
        target=args.target, state=args.state, limit=args.limit, among=among
    )
    return SessionListOut(sessions=found, total=total, truncated=len(found) < total)


@_tools.tool(
    "session_close",
    "Close a session",
    "Kill the session on the target (only the recorded one: its tmux identity is checked) and drop its "
    "record and output directory.",
    kind=TEARDOWN,
    render=_render_close,
)
async def session_close(ctx: ToolContext, args: SessionIn) -> SessionCloseResult:
    return await ctx.runtime.sessions.close(args.target, args.name)
