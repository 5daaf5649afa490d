"""Exec requests and answers on the agent protocol: the EXEC meta the gateway sends, the RawExec it makes of
the agent's RESULT (a malformed answer is a TransportError, never a crash), and what a kill reported."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from remoteops._errors import TransportError
from remoteops._exec import ExecRequest, RawExec, RawStream

__all__ = ["KillReport", "exec_meta", "raw_result"]


@dataclass
class KillReport:
    """Filled in when a request is cancelled: what is known about the kill on the target."""

    answered: bool = False
    confirmed: bool = False
    survivors: tuple[int, ...] = ()

    def record(self, meta: dict[str, Any]) -> None:
        self.answered = True
        self.confirmed = bool(meta.get("killed"))
        self.survivors = _pids(meta.get("survivors"))


def exec_meta(request: ExecRequest, kill_after_s: float) -> dict[str, Any]:
    """The EXEC request's meta (see ``_agent_program``): a fresh 64-bit marker per call."""
    return {
        "argv": list(request.argv),
        "cwd": request.cwd,
        "env": dict(request.env),
        "marker": secrets.token_hex(8),
        "limit_s": request.time_limit_s,
        "kill_s": kill_after_s,
        "head": request.head_cap,
        "tail": request.tail_cap,
        "stdin": request.stdin is not None,
    }


def _pids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(int(p) for p in value if isinstance(p, int))


def _stream(lengths: object, data: bytes, offset: int) -> tuple[RawStream, int]:
    if not isinstance(lengths, list) or len(lengths) != 3:
        raise ValueError("bad stream lengths")
    head_len, tail_len, total = (int(x) for x in lengths)
    end = offset + head_len + tail_len
    if min(head_len, tail_len) < 0 or end > len(data) or total < head_len + tail_len:
        raise ValueError("stream lengths do not match the data")
    head = data[offset : offset + head_len]
    tail = data[offset + head_len : end]
    return RawStream(head, tail, total - head_len - tail_len), end


def raw_result(
    meta: dict[str, Any], data: bytes, *, target: str, multiplexed: bool, elapsed_s: float
) -> RawExec:
    """The agent's RESULT of an EXEC as the carrier's raw record."""
    try:
        stdout, offset = _stream(meta.get("out"), data, 0)
        stderr, _ = _stream(meta.get("err"), data, offset)
        signal = meta.get("signal")
        return RawExec(
            exit_code=int(meta["exit"]),
            stdout=stdout,
            stderr=stderr,
            duration_s=float(meta.get("duration_s", elapsed_s)),
            carrier="agent",
            signal=signal if isinstance(signal, str) else None,
            timed_out=bool(meta.get("timed_out")),
            remote_killed=bool(meta.get("killed")),
            multiplexed=multiplexed,
            survivors=_pids(meta.get("survivors")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise TransportError(
            f"the agent's answer is malformed: {exc}", target=target, stage="agent"
        ) from None
