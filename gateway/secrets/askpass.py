"""The operator's askpass command: a program on the gateway host that prints a password (first stdout line).

It runs as a supervised child (its whole process group is ended on return, timeout or cancellation) with
``ROG_TARGET``, ``ROG_ACCOUNT``, ``ROG_PROVIDER`` and ``ROG_LOGIN`` added to the gateway's environment, no
stdin and stderr discarded (it may be a GUI dialog, a password manager's CLI, a hardware token).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

import anyio

from remoteops import PrivilegeError, SecretRequest, supervised_child

__all__ = ["MAX_PASSWORD_BYTES", "run_askpass", "wipe"]

MAX_PASSWORD_BYTES = 1024


def wipe(value: bytearray | None) -> None:
    """Zero a password buffer in place."""
    if value is not None:
        for index in range(len(value)):
            value[index] = 0


async def run_askpass(argv: Sequence[str], request: SecretRequest, *, timeout_s: float) -> bytearray:
    """The first line the command prints; ``PrivilegeError(reason="declined")`` when it fails, prints
    nothing or does not exit within ``timeout_s``."""
    env = dict(os.environ)
    env.update(
        ROG_TARGET=request.target,
        ROG_ACCOUNT=request.account,
        ROG_PROVIDER=request.provider,
        ROG_LOGIN=request.login,
    )
    data = bytearray()
    returncode: int | None = None
    with anyio.move_on_after(timeout_s) as scope:
        async with supervised_child(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) as proc:
            if proc.stdout is not None:
                async for chunk in proc.stdout:
                    data += chunk
                    if b"\n" in data or len(data) > MAX_PASSWORD_BYTES:
                        break
            returncode = await proc.wait()
    if scope.cancelled_caught:
        wipe(data)
        raise PrivilegeError(
            f"root.askpass_command gave no password within {timeout_s:g} s",
            reason="declined",
            provider=request.provider,
        )
    end = data.find(b"\n")
    line = data[: end if end >= 0 else min(len(data), MAX_PASSWORD_BYTES)]
    wipe(data)
    if returncode != 0 or not line:
        wipe(line)
        raise PrivilegeError(
            f"root.askpass_command exited {returncode} without a password",
            reason="declined",
            provider=request.provider,
        )
    return line
