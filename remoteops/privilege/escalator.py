"""The privilege choice point: run a request as root through the first provider that works.

``RemoteOps.run(..., privilege=...)`` is the one entry: ``user`` never escalates; ``root`` escalates at once;
``auto`` runs as the login user and escalates only after an *observed* permission denial (a non-zero exit
whose stderr says so). :class:`Escalator` tries the operator's providers in order (a provider that worked on a
target before is tried first: only that non-secret preference is cached), skips those the target's cached
capability probe rules out (with the reason), and records every attempt in a :class:`PrivilegeReport`.
Whatever provider is chosen, the wrapper re-proves uid 0 on the target before the command starts.

Password providers get their password from a :class:`SecretSource` (the gateway: a one-time page the human
fills in, or an operator askpass command) only when they are about to be tried, at most
``password_attempts`` times per target per ``password_window_s``.

The chain: every configured provider is tried in order until one runs the command or none is left. A provider
that fails (refused, no tty, no prompt, not uid 0) or whose password source has none (an askpass command that
printed nothing, a human who declined) hands on to the next; a provider whose password a human was asked for
(``SecretRequired``) hands on only to providers that need no password, and that request is raised when none of
them ran. Only a wrong password ends the search at once (it is reported, never retried with another guess).
The error, or the report of the provider that ran, names every attempt with its reason.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from remoteops._errors import RemoteOpsError
from remoteops._exec import Carrier, ExecRequest, RawExec
from remoteops._models import Capabilities, TargetIdentity
from remoteops._settings import TargetSpec
from remoteops.privilege.diagnose import sudo_refusal
from remoteops.privilege.errors import PrivilegeError, SecretRequired
from remoteops.privilege.models import (
    PASSWORD_PROVIDERS,
    PrivilegeMode,
    PrivilegeReport,
    PrivilegeSettings,
    ProviderAttempt,
    ProviderName,
)
from remoteops.privilege.wire import Escalation, OneTimeSecret

__all__ = ["Escalator", "SecretRequest", "SecretSource", "permission_denial", "report"]

_DENIAL = re.compile(
    rb"permission denied|operation not permitted|must be (?:run as )?root|are you root|only root|"
    rb"requires? (?:root|superuser)|access denied|insufficient privilege",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SecretRequest:
    """What a password is wanted for: shown to the human who enters it (never the password itself)."""

    target: str
    provider: ProviderName
    account: str  # whose password: the login user (sudo) or the su account
    login: str  # user@host:port the gateway logs in as


@runtime_checkable
class RootAgents(Protocol):
    """A carrier with root agents (``_agent_carrier``): one that is alive serves root commands through the
    provider it was started through, so that provider needs no new password."""

    def live_root(self, name: str) -> str | None: ...


class SecretSource(Protocol):
    async def obtain(self, request: SecretRequest) -> bytearray:
        """The password, for one use; or raise :class:`PrivilegeError` / ``SecretRequired``."""
        ...


def permission_denial(raw: RawExec) -> str | None:
    """The stderr line showing a permission denial of a failed command, or None."""
    if raw.exit_code == 0:
        return None
    for part in (raw.stderr.head, raw.stderr.tail):
        match = _DENIAL.search(part)
        if match is not None:
            start = part.rfind(b"\n", 0, match.start()) + 1
            end = part.find(b"\n", match.end())
            line = part[start : end if end >= 0 else len(part)]
            return line.decode(errors="replace").strip()[:200]
    return None


class CapabilityProbe(Protocol):
    """The target's capabilities (which providers can be tried), probed and cached by the facade."""

    def __call__(self, name: str) -> Awaitable[Capabilities]: ...


class Escalator:
    """Runs requests as root through the operator's providers. It is given what it needs: its settings, a
    capability probe (at construction), and per run the carrier and the secret source."""

    def __init__(self, settings: PrivilegeSettings, *, capabilities: CapabilityProbe) -> None:
        self._settings = settings
        self._capabilities = capabilities
        self._preferred: dict[str, ProviderName] = {}
        self._uses: dict[str, deque[float]] = {}

    def preferred(self, target: str) -> str | None:
        return self._preferred.get(target)

    def _order(self, target: str) -> list[ProviderName]:
        order = list(self._settings.providers)
        first = self._preferred.get(target)
        if first in order:
            order.remove(first)
            order.insert(0, first)
        return order

    def _skip_reason(self, provider: ProviderName, caps: Capabilities | None) -> str | None:
        s = self._settings
        refusal = sudo_refusal(caps.sudo_said or "", user=caps.user) if caps is not None else None
        if provider == "docker_host_root" and not s.docker_image:
            return "root.docker_image is not configured"
        if caps is None:
            return None  # no probe: try it, the wrapper proves uid 0 anyway
        tools = caps.tools
        if provider == "direct_root" and caps.uid != 0:
            return f"the login user is uid {caps.uid}, not 0"
        if provider == "sudo_nopasswd":
            if not tools.get("sudo"):
                return "sudo is not installed"
            if not caps.sudo_nopasswd:
                if refusal is not None and refusal.kind != "password_required":
                    return f"{refusal.kind}: {refusal.advice} (sudo said: {refusal.said})"
                return "sudo -n needs a password for the login user"
        if provider == "sudo_password":
            if not tools.get("sudo"):
                return "sudo is not installed"
            if refusal is not None and refusal.kind in ("tty_required", "account"):
                return f"{refusal.kind}: {refusal.advice} (sudo said: {refusal.said})"
        if provider == "su_password" and not tools.get("su"):
            return "su is not installed"
        if provider == "docker_host_root" and s.docker_binary == "docker" and not tools.get("docker"):
            return "docker is not installed"  # (another engine's command is not probed: it is just tried)
        return None

    def _may_try_password(self, target: str) -> bool:
        now = time.monotonic()
        uses = self._uses.setdefault(target, deque())
        while uses and now - uses[0] > self._settings.password_window_s:
            uses.popleft()
        return len(uses) < self._settings.password_attempts

    def _password_used(self, target: str) -> None:
        self._uses.setdefault(target, deque()).append(time.monotonic())

    def _escalation(self, provider: ProviderName) -> Escalation:
        s = self._settings
        return Escalation(
            provider=provider,
            su_user=s.su_user,
            docker_binary=s.docker_binary,
            docker_image=s.docker_image,
            docker_run_args=s.docker_run_args,
            wait_s=s.prompt_timeout_s,
            agent=s.agent,
        )

    async def run(
        self,
        spec: TargetSpec,
        identity: TargetIdentity,
        request: ExecRequest,
        carrier: Carrier,
        secrets: SecretSource | None,
        *,
        before: tuple[ProviderAttempt, ...] = (),
    ) -> tuple[RawExec, str, tuple[ProviderAttempt, ...]]:
        """Run ``request`` as root: (raw record, the provider it ran through, every attempt)."""
        name = spec.name
        attempts = list(before)
        try:
            caps: Capabilities | None = await self._capabilities(name)
        except RemoteOpsError:
            caps = None  # the providers are tried blind; each still proves uid 0 before anything runs

        def fail(error: PrivilegeError) -> PrivilegeError:
            error.attempts = tuple(attempts)
            error.target = name
            return error

        live = carrier.live_root(name) if isinstance(carrier, RootAgents) else None
        wanted: SecretRequired | None = None  # a password a human was asked for (raised when nothing ran)
        limited: PrivilegeError | None = None  # the password providers were rate-limited
        for provider in self._order(name):
            skip = self._skip_reason(provider, caps)
            if skip is not None:
                attempts.append(ProviderAttempt(provider=provider, outcome="skipped", reason=skip))
                continue
            secret: OneTimeSecret | None = None
            if provider in PASSWORD_PROVIDERS and provider != live:
                if wanted is not None:
                    attempts.append(
                        ProviderAttempt(
                            provider=provider,
                            outcome="skipped",
                            reason=f"the password for {wanted.provider} is wanted first",
                        )
                    )
                    continue
                if secrets is None:
                    attempts.append(
                        ProviderAttempt(provider=provider, outcome="skipped", reason="no way to ask a human")
                    )
                    continue
                if not self._may_try_password(name):
                    limited = PrivilegeError(
                        f"too many password attempts on {name}: at most "
                        f"{self._settings.password_attempts} per {self._settings.password_window_s:g} s",
                        reason="rate_limited",
                        provider=provider,
                    )
                    attempts.append(
                        ProviderAttempt(
                            provider=provider, outcome="skipped", reason="rate_limited", detail=str(limited)
                        )
                    )
                    continue
                account = self._settings.su_user if provider == "su_password" else identity.user
                login = f"{identity.user}@{identity.hostname}:{identity.port}"
                try:
                    value = await secrets.obtain(
                        SecretRequest(target=name, provider=provider, account=account, login=login)
                    )
                except SecretRequired as exc:
                    # a human was asked: the call is retried once it is entered; the providers after this
                    # one that need no password are still tried, those that need one are not asked too
                    attempts.append(ProviderAttempt(provider=provider, outcome="failed", reason=exc.reason))
                    wanted = wanted or exc
                    continue
                except PrivilegeError as exc:  # no password from this source (declined, ...): the next one
                    attempts.append(
                        ProviderAttempt(
                            provider=provider, outcome="failed", reason=exc.reason, detail=str(exc)
                        )
                    )
                    continue
                secret = OneTimeSecret(value)
                self._password_used(name)  # counted when a password is really tried, not when asked for
            attempt = dataclasses.replace(request, escalation=self._escalation(provider), secret=secret)
            try:
                raw = await carrier.execute(spec, identity, attempt)
            except PrivilegeError as exc:
                attempts.append(
                    ProviderAttempt(provider=provider, outcome="failed", reason=exc.reason, detail=str(exc))
                )
                if self._preferred.get(name) == provider:
                    del self._preferred[name]
                if exc.reason == "wrong_password":
                    raise fail(exc) from None
                continue
            finally:
                if secret is not None:
                    secret.wipe()
            attempts.append(ProviderAttempt(provider=provider, outcome="ran"))
            self._preferred[name] = provider
            return raw, provider, tuple(attempts)
        if wanted is not None:
            raise fail(wanted)
        if limited is not None:
            raise fail(limited)
        tried = ", ".join(f"{a.provider}: {a.outcome} ({a.reason})" for a in attempts if a.provider != "user")
        raise fail(
            PrivilegeError(
                f"no enabled privilege provider gave root on {name}: {tried or 'none is enabled'}",
                reason="not_allowed",
            )
        )


def report(
    requested: PrivilegeMode, provider: str | None, attempts: tuple[ProviderAttempt, ...], *, escalated: bool
) -> PrivilegeReport:
    return PrivilegeReport(
        requested=requested,
        ran_as="root" if provider is not None else "user",
        provider=provider,
        attempts=attempts,
        escalated_after_denial=escalated,
    )
