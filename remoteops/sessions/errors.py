"""Failures of interactive sessions; part of the remoteops exception tree (``remoteops._errors``)::

RemoteOpsError
└── ScopedError                   (scope: ``session``)
    └── SessionError              target, session (the name)
        ├── SessionNotFound           no session of that name is recorded for the target; a
        │                             ScopedNotFound
        ├── SessionExited             the session has ended on the target (``state``: exited); a
        │                             ScopedConflict
        ├── SessionConflict           the request cannot be served as asked (``reason``: stream_ended,
        │                             ...); a ScopedConflict
        ├── SessionCapabilityMissing  the target lacks a program sessions need (``tool``: tmux, base64,
        │                             ...); a ScopedCapabilityMissing
        └── SessionRemoteError        a session program on the target failed (``stage``); a
                                      ScopedRemoteError
"""

from __future__ import annotations

from typing import ClassVar

from remoteops._errors import (
    ScopedCapabilityMissing,
    ScopedConflict,
    ScopedError,
    ScopedNotFound,
    ScopedRemoteError,
)

__all__ = [
    "SessionCapabilityMissing",
    "SessionConflict",
    "SessionError",
    "SessionExited",
    "SessionNotFound",
    "SessionRemoteError",
]


class SessionError(ScopedError):
    scope: ClassVar[str] = "session"
    session: str | None

    def __init__(self, detail: str = "", *, target: str | None = None, session: str | None = None) -> None:
        super().__init__(detail, target=target, name=session)


class SessionNotFound(SessionError, ScopedNotFound):
    pass


class SessionExited(SessionError, ScopedConflict):
    def __init__(self, detail: str = "", *, target: str | None = None, session: str | None = None) -> None:
        super().__init__(detail, target=target, session=session)
        self.state = "exited"


class SessionConflict(SessionError, ScopedConflict):
    def __init__(
        self, detail: str = "", *, target: str | None = None, session: str | None = None, reason: str
    ) -> None:
        super().__init__(detail, target=target, session=session)
        self.reason = reason


class SessionCapabilityMissing(SessionError, ScopedCapabilityMissing):
    def __init__(
        self, detail: str = "", *, target: str | None = None, session: str | None = None, tool: str
    ) -> None:
        ScopedCapabilityMissing.__init__(self, detail, target=target, name=session, tool=tool)


class SessionRemoteError(SessionError, ScopedRemoteError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, session: str | None = None, stage: str
    ) -> None:
        ScopedRemoteError.__init__(self, detail, target=target, name=session, stage=stage)
