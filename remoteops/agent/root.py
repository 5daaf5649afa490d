"""The root agent: the agent started through the privilege provider the escalator chose.

With ``PrivilegeSettings.agent`` (``[root] agent = true``) a privileged request (``ExecRequest.escalation``)
is carried by a per-target *root* agent channel instead of one ssh process per command; the channel is
separate from the target's user agent channel and, like it, holds one of the pool's
``max_channels_per_target`` slots, closes itself when idle and is replaced when it dies.

Its remote command is the agent's loader behind the provider's words, made by
``_render.escalation_words`` (the one place they are made)::

    exec sudo -n -- sh -c PRELUDE rog-root-agent NONCE python3 -I -S -c LOADER SIZE SHA256 BOOT_NONCE

The prelude re-proves uid 0 (``id -u``; otherwise it prints ``\\x1eROG<nonce>U`` and exits 125, so
python never starts) and prints a start marker before it ``exec``\\s python, so what the provider said
before the marker (``sudo: a password is required``) is told apart from a python that cannot run there
(:func:`root_boot_failure`); BOOT_NONCE makes the loader's start marker on stdout (``boot``), so what the
login shell prints there is dropped. The agent then reports its effective uid in HELLO; a channel whose agent
is not uid 0 is closed and never carries anything (:func:`refuse_hello`), and every root command checks that
proof again before it is sent.

Behind ``sudo_password`` / ``su_password`` the password is written to the boot's stdin only after the
provider's prompt was seen on stderr, and the agent only after the prelude's start marker
(``_privilege_wire.enter_password``, as on the ssh path); it is used once, then wiped. The root agent then
serves later root commands without asking again until it ends (idle close, gateway close, death).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import anyio.abc

from remoteops._capture import HeadTail
from remoteops._render import RenderedCommand, escalation_words, new_nonce
from remoteops.agent.boot import AgentBoot, boot_failure
from remoteops.privilege.errors import PrivilegeError
from remoteops.privilege.wire import AuthWatch, Escalation, OneTimeSecret, enter_password
from remoteops.ssh.carrier import _escalation_failure

__all__ = ["RootBoot", "RootStart", "refuse_hello", "root_boot", "root_boot_failure"]

_PRELUDE = r"""[ "$(id -u)" = 0 ] || { printf '\036ROG%sU\n' "$1" >&2; exit 125; }
printf '\036ROG%sS\n' "$1" >&2
shift
exec "$@"
"""


@dataclass(frozen=True)
class RootBoot:
    """The rendered boot command of one root agent, and the markers its prelude prints."""

    escalation: Escalation
    rendered: RenderedCommand

    @property
    def command(self) -> str:
        return self.rendered.text


def root_boot(escalation: Escalation, boot: AgentBoot, python: str = "python3") -> RootBoot:
    nonce = new_nonce()
    inner = ["sh", "-c", _PRELUDE, "rog-root-agent", nonce, *boot.argv(python)]
    text = shlex.join(escalation_words(escalation, inner))
    return RootBoot(escalation=escalation, rendered=RenderedCommand(text=text, nonce=nonce))


def root_boot_failure(
    boot: RootBoot,
    code: int | None,
    stderr: bytes,
    *,
    target: str,
    via_master: bool,
    watch: AuthWatch | None = None,
) -> BaseException:
    """Why a root agent's session ended before HELLO: ssh's own failure (as for the user agent), the
    provider refusing (``PrivilegeError``: wrong password, no prompt, not permitted; nothing ran), or
    python unable to run as root there (``AgentUnavailable``: the command goes over ssh)."""
    marker = boot.rendered.start_marker
    index = stderr.find(marker)
    if index < 0 and watch is not None and (watch.password_sent or (watch.stalled and code != 255)):
        return _escalation_failure(target, boot.escalation, stderr, boot.rendered, watch)
    if code == 255 or code is None:
        text = stderr.decode(errors="replace").strip()
        return boot_failure(code, text, target=target, via_master=via_master)
    if index >= 0:  # root was proved and python was exec'd: why the agent did not come up
        after = stderr[index + len(marker) :].decode(errors="replace").strip()
        return boot_failure(code, after, target=target, via_master=via_master)
    return _escalation_failure(target, boot.escalation, stderr, boot.rendered, watch)


def refuse_hello(info: dict[str, Any], *, target: str, provider: str) -> PrivilegeError | None:
    """None when the agent's HELLO proves uid 0; else why the channel must not be used."""
    uid = info.get("uid")
    if isinstance(uid, int) and not isinstance(uid, bool) and uid == 0:
        return None
    return PrivilegeError(
        f"the root agent started through {provider} on {target} runs as uid {uid!r}, not 0; it was closed",
        target=target,
        reason="not_root",
        provider=provider,
    )


class RootStart:
    """What one root agent channel's start needs: its boot command, and for a password provider the stderr
    watch that sees the prompt and the start marker, and the one-time secret (wiped after the boot)."""

    def __init__(self, escalation: Escalation, secret: OneTimeSecret | None, boot: AgentBoot) -> None:
        self.boot = root_boot(escalation, boot)
        self.provider: str = escalation.provider
        self.watch: AuthWatch | None = None
        self._secret = secret
        if escalation.needs_password:
            self.watch = AuthWatch(
                0, 4096, prompt=escalation.prompt_bytes, start_marker=self.boot.rendered.start_marker
            )

    def stderr(self, default: HeadTail) -> HeadTail:
        return default if self.watch is None else self.watch

    def wait_s(self, connect_timeout_s: float) -> float:
        """How long the password entry may wait for the prompt, then again for the verdict (0: none)."""
        return 0.0 if self.watch is None else connect_timeout_s + self.boot.escalation.wait_s

    async def enter(self, stream: anyio.abc.ByteSendStream, wait_s: float) -> bool:
        """Before the agent is sent: the password after the prompt; True once the prelude started."""
        if self.watch is None:
            return True
        try:
            return await enter_password(stream, self.watch, self._secret, wait_s=wait_s)
        finally:
            if self._secret is not None:
                self._secret.wipe()

    def refused(self, hello: dict[str, Any], *, target: str) -> PrivilegeError | None:
        return refuse_hello(hello, target=target, provider=self.provider)

    def failure(self, code: int | None, stderr: bytes, *, target: str, via_master: bool) -> BaseException:
        return root_boot_failure(
            self.boot, code, stderr, target=target, via_master=via_master, watch=self.watch
        )
