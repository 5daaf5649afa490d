"""A client run *inside* a systemd target's network namespace (``nsenter -n``) by the service scenario.

``python -m acceptance._service_probe health URL TOKEN_FILE``: one ``gateway_health``; prints
``{pid, upstream_state, relayed_tools}`` as JSON.

``python -m acceptance._service_probe exec URL TOKEN_FILE``: three ``remote_exec`` of ``id -un`` on target
``box``; prints stdouts, exit codes, latencies and the master counters.

``python -m acceptance._service_probe drain URL TOKEN_FILE MARKER``: opens a pane through the relay, starts a
relayed ``wait_for_text`` that takes ``WAIT_S`` (its pattern never appears), writes MARKER once the call is
in flight (its first progress notification came back through the gateway), and prints
``{is_error, code, started, finished}`` (wall-clock seconds) once the call returned.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from acceptance._mcp import GatewayClient, error_code, structured

__all__ = ["WAIT_S", "main"]

WAIT_S = 6.0


async def _probe(command: str, url: str, token_file: Path, marker: Path | None) -> dict[str, Any]:
    token = (await anyio.to_thread.run_sync(token_file.read_text)).strip()
    out: dict[str, Any] = {}
    stack = contextlib.AsyncExitStack()
    client = await stack.enter_async_context(GatewayClient(url, {"Authorization": f"Bearer {token}"}, []))
    try:
        if command == "exec":
            out = {"stdout": [], "exit_codes": [], "ms": []}
            for _ in range(3):
                started = time.perf_counter()
                result = structured(
                    await client.call("remote_exec", {"target": "box", "argv": ["id", "-un"]})
                )
                out["ms"].append(round((time.perf_counter() - started) * 1000, 1))
                out["stdout"].append(result["stdout"])
                out["exit_codes"].append(result["exit_code"])
            transport = structured(await client.call("gateway_health", {}))["transport"]
            out.update(
                masters_created=transport["masters_created"], masters_reused=transport["masters_reused"]
            )
            out["median_ms"] = sorted(out["ms"])[1]
        elif command == "health":
            health = structured(await client.call("gateway_health", {}))
            ups = health["upstreams"]
            out = {"pid": health["pid"], "upstream_state": ups[0]["state"] if ups else None}
            out["relayed_tools"] = health["relayed_tools"]
        else:
            assert marker is not None
            pane = structured(
                await client.call("create_session", {"session_name": f"drain-{uuid.uuid4().hex[:6]}"})
            )
            args = {
                "patterns": [f"never-{uuid.uuid4().hex}"],
                "pane_id": pane["active_pane_id"],
                "timeout": WAIT_S,
            }
            in_flight = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                in_flight.set()  # libtmux is waiting and the gateway relays: the call is in flight

            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    out["started"] = time.time()
                    try:
                        result = await client.call("wait_for_text", args, progress=on_progress)
                    finally:
                        in_flight.set()  # a call that ended without progress is reported, not waited on
                    out["finished"] = time.time()
                    out["is_error"] = result.get("isError") is True
                    out["code"] = error_code(result)

                tg.start_soon(call)
                await in_flight.wait()
                await anyio.to_thread.run_sync(marker.write_text, "in flight\n")
                out["marker_at"] = time.time()
    finally:
        with contextlib.suppress(Exception):  # the gateway may be gone by now (drain test): closing can fail
            await stack.aclose()
    return out


async def _bounded(command: str, url: str, token_file: Path, marker: Path | None) -> dict[str, Any]:
    with anyio.fail_after(60):
        return await _probe(command, url, token_file, marker)


def main(argv: list[str]) -> int:
    command, url, token_file = argv[0], argv[1], Path(argv[2])
    marker = Path(argv[3]) if len(argv) > 3 else None
    out = anyio.run(_bounded, command, url, token_file, marker)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
