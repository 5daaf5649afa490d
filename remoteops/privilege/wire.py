"""What a privileged command carries and how its password reaches sudo or su.

:class:`Escalation` is the non-secret half of the choice point (the provider and its prompt), rendered by
``_render.render_command`` -- the one place commands are rendered. :class:`OneTimeSecret` is the secret half:
a password in memory for exactly one use, wiped after it. :class:`AuthWatch` is the stderr sink of such a
command: it sees sudo's unique prompt (or su's ``Password:``), the uid-0 proof failing, and the wrapper's
start marker. :func:`feed_after_prompt` (through :func:`enter_password`, which a root agent's boot uses
too) writes the password to stdin **only once the prompt was observed** (a pty would echo anything written
earlier), then waits for the verdict, and only after the command started does it write the caller's stdin
-- so neither sudo nor su can ever read the payload as a password, nor the command the password.
The password never appears in argv, the environment, or any output.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass, field

import anyio
import anyio.abc

from remoteops._capture import HeadTail
from remoteops.privilege.models import PASSWORD_PROVIDERS, ProviderName

__all__ = [
    "AuthWatch",
    "Escalation",
    "OneTimeSecret",
    "enter_password",
    "feed_after_prompt",
    "split_pre_start",
]

SU_PROMPT = b"Password:"
_PRE_START_KEEP = 8192
_CHUNK = 65536


@dataclass(frozen=True)
class Escalation:
    """How one command is raised to root. ``prompt``: sudo's unique ``-p`` prompt (fresh per call)."""

    provider: ProviderName
    su_user: str = "root"
    docker_binary: str = "docker"
    docker_image: str | None = None
    docker_run_args: tuple[str, ...] = ()
    wait_s: float = 15.0  # for the prompt, then for the verdict (plus the connect timeout)
    agent: bool = False  # may be carried by a root agent started through this provider (``_agent_root``)
    prompt: str = field(default_factory=lambda: f"[rog-sudo-{secrets.token_hex(6)}]")

    @property
    def needs_password(self) -> bool:
        return self.provider in PASSWORD_PROVIDERS

    @property
    def prompt_bytes(self) -> bytes:
        return SU_PROMPT if self.provider == "su_password" else self.prompt.encode()


class OneTimeSecret:
    """A password held in memory for one use. ``take`` hands it out once; ``wipe`` zeroes it. Its repr
    and str never show it. (Python may keep transient copies while the bytes are written to a pipe; none is
    ever logged, stored or rendered.)"""

    __slots__ = ("_used", "_value")

    def __init__(self, value: bytearray) -> None:
        self._value = value
        self._used = False

    def __repr__(self) -> str:
        return "OneTimeSecret(<hidden>)"

    __str__ = __repr__

    @property
    def used(self) -> bool:
        return self._used

    def take(self) -> bytearray:
        if self._used:
            raise RuntimeError("the secret was already used")
        self._used = True
        value, self._value = self._value, bytearray()
        return value

    def wipe(self) -> None:
        for index in range(len(self._value)):
            self._value[index] = 0
        self._value = bytearray()
        self._used = True


class AuthWatch(HeadTail):
    """stderr sink of a privileged command: bounded capture plus what happened before the command started."""

    def __init__(self, head_cap: int, tail_cap: int, *, prompt: bytes, start_marker: bytes) -> None:
        super().__init__(head_cap, tail_cap)
        self._prompt = prompt
        self._start = start_marker
        self._pre = bytearray()
        self._event = anyio.Event()
        self.prompts = 0
        self.started = False
        self.password_sent = False
        self.rejected = False  # a second prompt after the password: sudo said "Sorry, try again."
        self.stalled = False  # no prompt (or no verdict) within the limit

    def feed(self, data: bytes) -> None:
        super().feed(data)
        if not self.started and len(self._pre) < _PRE_START_KEEP:
            self._pre += data[: _PRE_START_KEEP - len(self._pre)]
            self.started = self._start in self._pre
            before = self._pre.split(self._start, 1)[0]
            self.prompts = before.count(self._prompt)
            self._event.set()

    async def changed(self) -> None:
        await self._event.wait()
        self._event = anyio.Event()


def split_pre_start(stderr_head: bytes, start_marker: bytes) -> tuple[bytes, bytes]:
    """(what sudo/su printed before the command started, the rest from the start marker on)."""
    index = stderr_head.find(start_marker)
    if index < 0:
        return stderr_head, b""
    return stderr_head[:index], stderr_head[index:]


async def _send_all(stream: anyio.abc.ByteSendStream, data: bytes) -> None:
    view = memoryview(data)
    for offset in range(0, len(view), _CHUNK):
        await stream.send(bytes(view[offset : offset + _CHUNK]))


async def enter_password(
    stream: anyio.abc.ByteSendStream, watch: AuthWatch, secret: OneTimeSecret | None, *, wait_s: float
) -> bool:
    """Wait for the prompt (or the start), write the password only then, wait for the verdict. True when
    the command started; otherwise ``watch`` says why (``stalled``, ``rejected``, ``password_sent``).
    The stream stays open (the caller's payload, or an agent's frames, follow on it)."""
    with anyio.move_on_after(wait_s):
        while watch.prompts == 0 and not watch.started:
            await watch.changed()
    if not watch.started and watch.prompts == 0:
        watch.stalled = True
        return False
    if not watch.started:
        if secret is None:  # a provider without a password was asked for one: never guess
            watch.stalled = True
            return False
        password = secret.take()
        try:
            await stream.send(bytes(password) + b"\n")
        finally:
            for index in range(len(password)):
                password[index] = 0
        watch.password_sent = True
        with anyio.move_on_after(wait_s):
            while not watch.started and watch.prompts < 2:
                await watch.changed()
        if not watch.started:
            watch.rejected = watch.prompts >= 2
            watch.stalled = not watch.rejected
            return False
    return True


async def feed_after_prompt(
    stream: anyio.abc.ByteSendStream,
    watch: AuthWatch,
    secret: OneTimeSecret | None,
    payload: bytes | None,
    *,
    wait_s: float,
) -> None:
    """The stdin of a privileged command: password after the prompt, payload after the start."""
    try:
        if await enter_password(stream, watch, secret, wait_s=wait_s) and payload:
            await _send_all(stream, payload)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        return
    finally:
        if secret is not None:
            secret.wipe()
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await stream.aclose()
