"""Failures of long-running remote tasks; part of the remoteops exception tree (``remoteops._errors``)::

RemoteOpsError
└── ScopedError               (scope: ``task_id``)
    └── TaskError             task_id
        ├── TaskNotFound          no such task (never started, or purged after retention); a ScopedNotFound
        ├── TaskConflict          the task is in a state the operation cannot act on (``state``); a
        │                         ScopedConflict
        ├── TaskCapabilityMissing the target lacks a program tasks need (``tool``: setsid, sha256sum, tmux,
        │                         ...); a ScopedCapabilityMissing
        └── TaskRemoteError       a task program on the target failed (``stage``: start / read / cancel /
                                  purge); a ScopedRemoteError
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

__all__ = ["TaskCapabilityMissing", "TaskConflict", "TaskError", "TaskNotFound", "TaskRemoteError"]


class TaskError(ScopedError):
    scope: ClassVar[str] = "task_id"
    task_id: str | None

    def __init__(self, detail: str = "", *, target: str | None = None, task_id: str | None = None) -> None:
        super().__init__(detail, target=target, name=task_id)


class TaskNotFound(TaskError, ScopedNotFound):
    pass


class TaskConflict(TaskError, ScopedConflict):
    def __init__(
        self, detail: str = "", *, target: str | None = None, task_id: str | None = None, state: str
    ) -> None:
        super().__init__(detail, target=target, task_id=task_id)
        self.state = state


class TaskCapabilityMissing(TaskError, ScopedCapabilityMissing):
    def __init__(
        self, detail: str = "", *, target: str | None = None, task_id: str | None = None, tool: str
    ) -> None:
        ScopedCapabilityMissing.__init__(self, detail, target=target, name=task_id, tool=tool)


class TaskRemoteError(TaskError, ScopedRemoteError):
    def __init__(
        self, detail: str = "", *, target: str | None = None, task_id: str | None = None, stage: str
    ) -> None:
        ScopedRemoteError.__init__(self, detail, target=target, name=task_id, stage=stage)
