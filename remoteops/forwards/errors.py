"""Failures of managed forwards; part of the remoteops tree (``remoteops._errors``)::

    RemoteOpsError
    └── ForwardError               forward_id
        ├── ForwardNotFound        no forward with that id (never created, or already closed)
        ├── ForwardConflict        the name belongs to a forward with a different specification
        └── ForwardStartFailed     reason: port_in_use | remote_refused | exited | timeout;
                                   the ssh process was stopped: nothing is left running or recorded

Host-key, authentication and connection failures of a forward's ssh are the tree's usual
``HostKeyError`` / ``AuthError`` / ``ConnectError`` (stage ``"forward"``).
"""

from __future__ import annotations

from typing import Literal

from remoteops._errors import RemoteOpsError

__all__ = ["ForwardConflict", "ForwardError", "ForwardNotFound", "ForwardStartFailed", "StartFailure"]

StartFailure = Literal["port_in_use", "remote_refused", "exited", "timeout"]


class ForwardError(RemoteOpsError):
    def __init__(self, detail: str = "", *, target: str | None = None, forward_id: str | None = None) -> None:
        super().__init__(detail, target=target)
        self.forward_id = forward_id


class ForwardNotFound(ForwardError):
    pass


class ForwardConflict(ForwardError):
    pass


class ForwardStartFailed(ForwardError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        forward_id: str | None = None,
        reason: StartFailure,
    ) -> None:
        super().__init__(detail, target=target, forward_id=forward_id)
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.reason in ("timeout", "exited")
