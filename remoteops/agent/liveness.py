"""Liveness of one agent channel: a stuck agent (SIGSTOP, a wedged target) is found, bounded.

A channel whose agent lists ``PING`` in its HELLO ``kinds`` is probed on its own schedule, idle or busy (as
the upstream relay's liveness does): whenever ``agent_probe_s`` passed without any byte from the agent, a
PING goes out, and it must be answered within ``agent_lost_after_s`` (counted from the last sign of life:
bytes read from the agent, or bytes of a long write it keeps taking) — else the channel is declared lost
(``lose``), so the requests in flight end at once as ``TransportLost`` (never re-sent) and the carrier
replaces the agent. A busy agent answers PINGs from its loop while its commands run; only a stopped or
wedged one (or one stuck for the whole bound in one synchronous file primitive) stays silent.

Before a request is written to a channel nothing was heard from for ``agent_probe_s``, the caller waits
for a probe (:meth:`Liveness.check`): a request is never handed to an agent that is already known silent.
An agent without ``PING`` (an older build) is not probed: its channel is trusted as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from remoteops._settings import TransportSettings

__all__ = ["Liveness"]


class Liveness:
    def __init__(
        self,
        settings: TransportSettings,
        ping: Callable[[], Awaitable[bool]],
        lose: Callable[[], None],
    ) -> None:
        """``ping`` sends one PING and returns once it was answered (True) or the channel died (False);
        ``lose`` declares the channel lost."""
        self._interval = settings.agent_probe_s
        self._bound = settings.agent_lost_after_s
        self._ping = ping
        self._lose = lose
        self.last_heard = anyio.current_time()
        self.alive = True
        self.probes = 0
        self._wanted = anyio.Event()
        self._round = anyio.Event()  # set when the probe in progress (or the next one) has its outcome

    def heard(self) -> None:
        """Something arrived from the agent: its loop runs."""
        self.last_heard = anyio.current_time()

    def stop(self) -> None:
        """The channel ended for another reason: release whoever waits for a probe."""
        self.alive = False
        self._round.set()

    def fresh(self) -> bool:
        return anyio.current_time() - self.last_heard < self._interval

    async def check(self) -> bool:
        """True when the agent was heard from within ``agent_probe_s``, or answers a probe now (bounded)."""
        if not self.alive:
            return False
        if self.fresh():
            return True
        round_ = self._round
        self._wanted.set()
        await round_.wait()
        return self.alive

    async def run(self) -> None:
        """Probe until the channel is lost (or this task is cancelled with the channel)."""
        while self.alive:
            due = self.last_heard + self._interval
            with anyio.move_on_after(max(0.0, due - anyio.current_time())):
                await self._wanted.wait()
            if self.fresh() and not self._wanted.is_set():
                continue
            self._wanted = anyio.Event()
            self.probes += 1
            answered = await self._probe()
            round_, self._round = self._round, anyio.Event()
            if answered:
                self.heard()
                round_.set()
                continue
            self.stop()
            round_.set()
            if answered is None:  # silent for the whole bound: stuck (else it died on its own)
                self._lose()
            return

    async def _probe(self) -> bool | None:
        """One PING: True answered, False the channel died, None nothing heard for the whole bound. The
        bound runs from the later of the probe's start and the last sign of life (a long write the agent
        keeps reading is one), so a probe queued behind a big payload is not taken for silence."""
        sent = anyio.current_time()
        outcome: list[bool] = []
        done = anyio.Event()

        async def ping() -> None:
            outcome.append(await self._ping())
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(ping)
            while not done.is_set():
                deadline = max(sent, self.last_heard) + self._bound
                if anyio.current_time() >= deadline:
                    break
                with anyio.move_on_after(deadline - anyio.current_time()):
                    await done.wait()
            tg.cancel_scope.cancel()
        return outcome[0] if outcome else None
