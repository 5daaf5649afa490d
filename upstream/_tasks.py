"""`UpstreamTasks`: the upstream's own MCP tasks, relayed untouched (reached as `Upstream.tasks`).

Which tasks an upstream offers follows from its last successful connect (`UpstreamTasks.era`):

* ``"v1"`` — the tasks utility of 2025-11-25: that version was negotiated and the ``initialize``
  capabilities carry ``tasks.requests.tools.call``. A task is asked for with a ``task`` param on
  ``tools/call`` (its ``ttl`` passed on); then ``tasks/get``, ``tasks/result``, ``tasks/list``,
  ``tasks/cancel``.
* ``"v2"`` — the ``io.modelcontextprotocol/tasks`` extension of 2026-07-28: a modern version was
  negotiated and the ``server/discover`` capabilities list the extension under ``extensions``. The
  extension is declared on each request that wants it, in the 2026-07-28 envelope the upstream leg's SDK
  writes (``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``); then ``tasks/get``,
  ``tasks/update``, ``tasks/cancel``.

Every answer is returned as the plain JSON object the upstream sent (a ``CreateTaskResult``, a ``Task``,
a ``DetailedTask``, or an ordinary ``CallToolResult`` when a 2026-07-28 upstream chose not to make the
call a task): nothing is validated as a ``CallToolResult``, nothing is added or dropped.

The requests go through the one `Relay` (``upstream._relay``), so they share its fault semantics: what
provably never ran is sent again, what may have run (a task creation the connection lost under it) is
reported ambiguous and never re-sent.

Why the requests are sent raw (`send_raw`): the SDK (2.3) validates a 2025-11-25 ``tools/call`` result as a
``CallToolResult`` (a ``CreateTaskResult`` fails it), and its 2026-07-28 envelope overwrites the request's
client capabilities with the session's own, so an extension cannot be declared on one request only
(declaring it on the session would let the upstream turn every relayed call into a task). `send_raw` stamps
the request with the session's own envelope (`ClientSession._stamp`), adds the extension to that request's
capabilities, and sends it on the session's dispatcher (`ClientSession._dispatcher.send_raw_request`): the
two private names this package reads, here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, encode_header_value
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from upstream._calls import call_params
from upstream._elicit import ElicitCallback
from upstream._relay import ProgressCallback, Relay
from upstream._settings import UpstreamSettings
from upstream._supervisor import Supervisor

__all__ = ["EXTENSION_ID", "TasksEra", "UpstreamTasks", "send_raw", "tasks_era"]

EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"
_FIRST_TASKS_VERSION: Final = "2025-11-25"

TasksEra = Literal["v1", "v2"]
"""``v1``: the 2025-11-25 tasks utility; ``v2``: the 2026-07-28 ``io.modelcontextprotocol/tasks``
extension."""


def tasks_era(protocol_version: str | None, capabilities: types.ServerCapabilities | None) -> TasksEra | None:
    """Which tasks an upstream that negotiated ``protocol_version`` and declared ``capabilities`` offers."""
    if protocol_version is None or capabilities is None:
        return None
    if protocol_version in MODERN_PROTOCOL_VERSIONS:
        return "v2" if EXTENSION_ID in (capabilities.extensions or {}) else None
    tasks = capabilities.tasks
    requests = tasks.requests if tasks is not None else None
    tools = requests.tools if requests is not None else None
    if protocol_version == _FIRST_TASKS_VERSION and tools is not None and tools.call is not None:
        return "v1"
    return None


async def send_raw(
    session: ClientSession,
    method: str,
    params: dict[str, Any],
    *,
    declare: bool,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Send one request in the session's own envelope and return the answer's JSON object unvalidated.
    ``declare``: on a 2026-07-28 connection, declare the tasks extension on this request (on a
    handshake-era connection there is no per-request envelope, and nothing is added)."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {}
    session._stamp(data, opts)  # the envelope the SDK writes on every request (module docstring)
    meta = data["params"].get("_meta")
    caps = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    if declare and isinstance(meta, dict) and isinstance(caps, dict):
        extensions = dict(caps.get("extensions") or {})
        extensions[EXTENSION_ID] = {}
        meta[CLIENT_CAPABILITIES_META_KEY] = {**caps, "extensions": extensions}
    headers = opts.setdefault("headers", {})
    task_id = params.get("taskId")
    if MCP_METHOD_HEADER in headers and isinstance(task_id, str):  # 2026-07-28: tasks/* name their task
        headers[MCP_NAME_HEADER] = encode_header_value(task_id)
    if progress is not None:
        opts["on_progress"] = progress
    return await session._dispatcher.send_raw_request(method, data["params"], opts)


class UpstreamTasks:
    """The upstream's own tasks: the era it offers, and each task request sent through the `Relay`."""

    def __init__(self, settings: UpstreamSettings, sup: Supervisor, relay: Relay) -> None:
        self._settings = settings
        self._sup = sup
        self._relay = relay

    @property
    def era(self) -> TasksEra | None:
        """The tasks the upstream offered on its last successful connect (None: none, or never connected)."""
        return tasks_era(self._sup.protocol_version, self._sup.capabilities)

    async def _send(
        self,
        method: str,
        params: dict[str, Any],
        era: TasksEra,
        *,
        subject: str,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> dict[str, Any]:
        async def send(session: ClientSession) -> dict[str, Any]:
            return await send_raw(session, method, dict(params), declare=era == "v2", progress=progress)

        return await self._relay.run(send, method=method, subject=subject, elicit=elicit)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        era: TasksEra,
        *,
        meta: Mapping[str, Any] | None = None,
        ttl_ms: int | None = None,
        progress: ProgressCallback | None = None,
        elicit: ElicitCallback | None = None,
    ) -> dict[str, Any]:
        """One ``tools/call`` asking for a task in ``era`` (v1: the ``task`` param, with ``ttl_ms`` when
        given; v2: the extension declared). Returns the upstream's answer as sent: a ``CreateTaskResult``,
        or the ordinary ``CallToolResult`` of an upstream that answered inline.

        Raises what `Upstream.call_tool` raises; a creation lost after it was sent is `UpstreamAmbiguous`
        (never re-sent: the upstream may hold a task nobody knows the id of)."""
        params = call_params(name, arguments, meta).model_dump(by_alias=True, mode="json", exclude_none=True)
        if era == "v1":
            params["task"] = {"ttl": ttl_ms} if ttl_ms is not None else {}
        return await self._send("tools/call", params, era, subject=name, progress=progress, elicit=elicit)

    async def get(self, task_id: str, era: TasksEra) -> dict[str, Any]:
        """``tasks/get``: a ``Task`` (v1) or a ``DetailedTask`` (v2), as sent."""
        return await self._send("tasks/get", {"taskId": task_id}, era, subject=task_id)

    async def result(self, task_id: str) -> dict[str, Any]:
        """``tasks/result`` (v1): waits, bounded by ``call_timeout_s``, for the task's ``CallToolResult``."""
        return await self._send("tasks/result", {"taskId": task_id}, "v1", subject=task_id)

    async def cancel(self, task_id: str, era: TasksEra) -> dict[str, Any]:
        """``tasks/cancel``: the cancelled ``Task`` (v1) or the extension's empty result (v2), as sent."""
        return await self._send("tasks/cancel", {"taskId": task_id}, era, subject=task_id)

    async def update(self, task_id: str, responses: Mapping[str, Any]) -> dict[str, Any]:
        """``tasks/update`` (v2): answers to the task's outstanding input requests, by key."""
        params = {"taskId": task_id, "inputResponses": dict(responses)}
        return await self._send("tasks/update", params, "v2", subject=task_id)

    async def list(self, cursor: str | None = None) -> dict[str, Any]:
        """``tasks/list`` (v1): one page of the upstream's tasks, as sent."""
        params = {"cursor": cursor} if cursor is not None else {}
        return await self._send("tasks/list", params, "v1", subject="tasks/list")
