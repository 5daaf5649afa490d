"""Privilege failures, part of the remoteops exception tree (``remoteops._errors``)::

    RemoteOpsError
    └── PrivilegeError      reason, provider, attempts: escalation was refused or failed; the command did
        │                   not run as root (nothing of it ran at all unless ``reason == "not_root"`` says so)
        └── SecretRequired  a provider needs a password nobody has entered yet; ``entry`` tells the human
                            where to enter it (a one-time link), the call may be retried afterwards

A wrong password is ``PrivilegeError(reason="wrong_password")``; nothing of what was typed is echoed.
"""

from __future__ import annotations

from typing import Literal

from remoteops._errors import RemoteOpsError
from remoteops.privilege.models import ProviderAttempt

__all__ = ["PrivilegeError", "PrivilegeReason", "SecretRequired"]

PrivilegeReason = Literal[
    "not_allowed",  # no enabled provider applies to this target
    "refused",  # the provider refused (sudo -n needs a password, su not permitted, PAM refused the account)
    "tty_required",  # sudo's ``Defaults requiretty``: no password can help (fix: ``!requiretty``)
    "wrong_password",
    "no_prompt",  # sudo/su never asked (or never answered) within prompt_timeout_s
    "not_root",  # the provider ran, but not as uid 0: the command was not started
    "secret_required",
    "declined",  # the human declined to enter the password
    "rate_limited",  # too many password attempts on this target
]


class PrivilegeError(RemoteOpsError):
    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        reason: PrivilegeReason,
        provider: str | None = None,
        attempts: tuple[ProviderAttempt, ...] = (),
    ) -> None:
        super().__init__(detail or reason, target=target)
        self.reason: PrivilegeReason = reason
        self.provider = provider
        self.attempts = attempts


class SecretRequired(PrivilegeError):
    """``entry``: where the human enters the secret (a one-time URL); ``expires_s``: how long it is valid.

    Retryable: the same call succeeds once the human has entered the secret on the page (``retry_after``
    says so); ``root_agent`` is whether one entry opens a root agent that later commands reuse."""

    retry_after = "the password is entered on the page at details.entry"

    def __init__(
        self,
        detail: str = "",
        *,
        target: str | None = None,
        provider: str | None = None,
        account: str,
        entry: str,
        expires_s: float,
        attempts: tuple[ProviderAttempt, ...] = (),
        root_agent: bool | None = None,
    ) -> None:
        super().__init__(
            detail, target=target, reason="secret_required", provider=provider, attempts=attempts
        )
        self.account = account
        self.entry = entry
        self.expires_s = expires_s
        self.root_agent = root_agent

    @property
    def retryable(self) -> bool:
        return True
