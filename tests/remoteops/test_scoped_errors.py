"""The task and session error families share one scoped base (``remoteops._errors.ScopedError`` and its
kinds): each public name keeps its fields and its gateway error code, and the families stay apart."""

from __future__ import annotations

import pytest

from gateway._errmap import translate
from gateway._errors import ErrorCode
from remoteops import (
    RemoteOpsError,
    SessionCapabilityMissing,
    SessionConflict,
    SessionError,
    SessionExited,
    SessionNotFound,
    SessionRemoteError,
    TaskCapabilityMissing,
    TaskConflict,
    TaskError,
    TaskNotFound,
    TaskRemoteError,
)
from remoteops._errors import (
    ScopedCapabilityMissing,
    ScopedConflict,
    ScopedError,
    ScopedNotFound,
    ScopedRemoteError,
)

# (error, its scoped kind, its code, its own fields beyond target/detail)
CASES = [
    (TaskError("x", target="web", task_id="t-1"), ScopedError, ErrorCode.REMOTE_NONZERO_EXIT, {}),
    (TaskNotFound("x", target="web", task_id="t-1"), ScopedNotFound, ErrorCode.NOT_FOUND, {}),
    (
        TaskConflict("x", target="web", task_id="t-1", state="running"),
        ScopedConflict,
        ErrorCode.CONFLICT,
        {"state": "running"},
    ),
    (
        TaskCapabilityMissing("x", target="web", task_id="t-1", tool="setsid"),
        ScopedCapabilityMissing,
        ErrorCode.MISSING_REMOTE_CAPABILITY,
        {"tool": "setsid"},
    ),
    (
        TaskRemoteError("x", target="web", task_id="t-1", stage="read"),
        ScopedRemoteError,
        ErrorCode.REMOTE_NONZERO_EXIT,
        {"stage": "read"},
    ),
    (SessionError("x", target="web", session="s"), ScopedError, ErrorCode.REMOTE_NONZERO_EXIT, {}),
    (SessionNotFound("x", target="web", session="s"), ScopedNotFound, ErrorCode.NOT_FOUND, {}),
    (SessionExited("x", target="web", session="s"), ScopedConflict, ErrorCode.CONFLICT, {"state": "exited"}),
    (
        SessionConflict("x", target="web", session="s", reason="stream_ended"),
        ScopedConflict,
        ErrorCode.CONFLICT,
        {"reason": "stream_ended"},
    ),
    (
        SessionCapabilityMissing("x", target="web", session="s", tool="tmux"),
        ScopedCapabilityMissing,
        ErrorCode.MISSING_REMOTE_CAPABILITY,
        {"tool": "tmux"},
    ),
    (
        SessionRemoteError("x", target="web", session="s", stage="ensure"),
        ScopedRemoteError,
        ErrorCode.REMOTE_NONZERO_EXIT,
        {"stage": "ensure"},
    ),
]


@pytest.mark.parametrize(("exc", "kind", "code", "fields"), CASES, ids=lambda v: type(v).__name__)
def test_each_task_and_session_error_keeps_its_code_and_fields_on_the_shared_base(
    exc: RemoteOpsError, kind: type[ScopedError], code: ErrorCode, fields: dict[str, str]
) -> None:
    assert isinstance(exc, kind)
    failure = translate(exc)
    assert failure is not None
    assert failure.code is code
    scope = "task_id" if isinstance(exc, TaskError) else "session"
    own = {"task_id": "t-1"} if scope == "task_id" else {"session": "s"}
    assert {name: failure.details[name] for name in (*own, *fields)} == {**own, **fields}
    assert (exc.target, exc.detail, getattr(exc, scope)) == ("web", "x", own[scope])
    assert "name" not in failure.details


def test_the_two_families_stay_apart() -> None:
    assert not isinstance(TaskNotFound(task_id="t-1"), SessionError)
    assert not isinstance(SessionNotFound(session="s"), TaskError)
    assert TaskNotFound.scope == "task_id"
    assert SessionNotFound.scope == "session"
