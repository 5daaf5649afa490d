"""What sudo (or su, or PAM through them) said when it refused, recognised for what it is.

``sudo -n true`` in the capability probe and the stderr a provider printed before a command never started
both pass through :func:`sudo_refusal`. sudo's answers are told apart because they need different fixes:

* ``tty_required`` -- ``Defaults requiretty`` applies to the login user ("sorry, you must have a tty to run
  sudo"): sudo refuses before any authentication, so **no password can help**, with or without NOPASSWD. The
  fix is ``Defaults:<user> !requiretty`` in sudoers (or another provider, e.g. ``su_password``);
* ``password_required`` -- ``sudo -n`` needs a password (no NOPASSWD rule): ``sudo_password`` can work;
* ``not_permitted`` -- the user may not run the command through sudo at all;
* ``account`` -- PAM refused the account (locked, expired, password expired, account management error):
  a password typed again cannot help; the account must be fixed on the target.

sudo's lecture (printed once before its first prompt) is no refusal: it is dropped from what is quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["SudoRefusal", "strip_lecture", "sudo_refusal"]

RefusalKind = Literal["tty_required", "password_required", "not_permitted", "account"]

_TTY = re.compile(r"you must have a tty|requiretty|sorry, you must have a terminal", re.IGNORECASE)
_PASSWORD = re.compile(r"a password is required|a terminal is required to read the password", re.IGNORECASE)
_NOT_PERMITTED = re.compile(r"is not in the sudoers file|is not allowed to execute|may not run sudo")
_ACCOUNT = re.compile(
    r"account validation failure|account management error|pam_\w+|authentication service cannot|"
    r"password has expired|account (?:is )?(?:locked|expired)|account has expired|"
    r"user account has expired|permission denied \(pam\)",
    re.IGNORECASE,
)
_LECTURE = re.compile(
    r"We trust you have received the usual lecture.*?(?:great responsibility\.?|$)", re.IGNORECASE | re.DOTALL
)


@dataclass(frozen=True)
class SudoRefusal:
    kind: RefusalKind
    said: str  # the line sudo printed (the lecture removed)
    advice: str  # what it means and what fixes it, for a human


def strip_lecture(text: str) -> str:
    """``text`` without sudo's first-use lecture (its numbered lines included)."""
    return _LECTURE.sub("", text).strip()


def _line(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()[:300]


def sudo_refusal(text: str, *, user: str | None = None) -> SudoRefusal | None:
    """Recognise sudo's refusal in ``text`` (what it printed before a command started), or None."""
    text = strip_lecture(text)
    who = user or "<login user>"
    found = _TTY.search(text)
    if found is not None:
        return SudoRefusal(
            "tty_required",
            _line(text, found),
            f"sudo requires a terminal for {who} (Defaults requiretty): sudo refuses before any "
            "authentication, so no password can help. Fix on the target: add "
            f"'Defaults:{who} !requiretty' to sudoers (visudo -f /etc/sudoers.d/<file>), or configure "
            "another provider (su_password)",
        )
    found = _ACCOUNT.search(text)
    if found is not None:
        return SudoRefusal(
            "account",
            _line(text, found),
            f"PAM refused the account {who} (locked, expired or an account management error): no password "
            "can help until the account is fixed on the target",
        )
    found = _NOT_PERMITTED.search(text)
    if found is not None:
        return SudoRefusal("not_permitted", _line(text, found), f"sudoers does not allow {who} this command")
    found = _PASSWORD.search(text)
    if found is not None:
        return SudoRefusal(
            "password_required",
            _line(text, found),
            f"sudo -n needs a password for {who} (no NOPASSWD rule): sudo_password can use one",
        )
    return None
