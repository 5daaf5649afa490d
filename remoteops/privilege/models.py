"""Privilege settings and the non-secret report of one privileged call (which providers were tried, why).

Providers, in the operator's order, each enabled by being listed:

* ``direct_root`` -- the SSH login user is uid 0: the command runs as it is;
* ``sudo_nopasswd`` -- ``sudo -n`` (a NOPASSWD rule);
* ``docker_host_root`` -- a privileged container sharing the host's PID namespace and root filesystem
  (``chroot /host``); only with ``docker_image`` set;
* ``sudo_password`` -- ``sudo -S`` with the login user's password, entered by a human;
* ``su_password`` -- ``su - <su_user>`` with that account's password, entered by a human.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "PASSWORD_PROVIDERS",
    "PrivilegeMode",
    "PrivilegeReport",
    "PrivilegeSettings",
    "ProviderAttempt",
    "ProviderName",
]

ProviderName = Literal["direct_root", "sudo_nopasswd", "docker_host_root", "sudo_password", "su_password"]
PrivilegeMode = Literal["auto", "user", "root"]
PASSWORD_PROVIDERS: frozenset[str] = frozenset({"sudo_password", "su_password"})

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PrivilegeSettings(BaseModel):
    """How remoteops escalates. A provider not listed is never tried."""

    model_config = _FROZEN

    providers: tuple[ProviderName, ...] = ("direct_root", "sudo_nopasswd", "sudo_password", "su_password")
    su_user: str = Field(default="root", pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$")
    docker_image: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_./:@-]{0,254}$")
    docker_binary: str = "docker"
    docker_run_args: tuple[
        Annotated[str, Field(min_length=1, max_length=256, pattern=r"^-[^\x00]*$")], ...
    ] = Field(default=(), max_length=32)
    """Extra ``run`` options for the engine on the target, placed before the image: each one option word in
    ``--name=value`` form (``--runtime=runc``, ``--ulimit=nproc=1024:1024``), passed as one argv word."""
    password_attempts: int = Field(default=5, ge=1, le=100)  # password uses per target per window
    password_window_s: float = Field(default=300, gt=0)
    prompt_timeout_s: float = Field(default=15, gt=0, le=120)  # wait for sudo/su's prompt and verdict
    agent: bool = False
    """Carry root commands over a per-target root agent started through the chosen provider (one channel
    for many commands) instead of one ssh process per command; a password provider's password is entered
    once, at the root agent's boot."""


class ProviderAttempt(BaseModel):
    model_config = _FROZEN

    provider: str  # a ProviderName, or "user" for the unprivileged first run of privilege=auto
    outcome: Literal["ran", "skipped", "failed", "denied"]
    reason: str = ""  # a short code (a PrivilegeReason) for a failure, a sentence for a skip or denial
    detail: str = ""  # for a failure: what the provider said and what would fix it (never anything typed)


class PrivilegeReport(BaseModel):
    """Non-secret: which providers were attempted, why each was skipped or failed, which one ran."""

    model_config = _FROZEN

    requested: PrivilegeMode
    ran_as: Literal["user", "root"]
    provider: str | None = None  # the provider the command ran through (None: as the login user)
    attempts: tuple[ProviderAttempt, ...] = ()
    escalated_after_denial: bool = False
