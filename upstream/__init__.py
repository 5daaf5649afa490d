"""The client of one upstream MCP server: supervised connection, single-flight reconnect,
no replay after ambiguous loss, faithful passthrough of tools, resources, prompts, the upstream's own
MCP tasks and their results.

Knows nothing of `gateway` or `remoteops`. The exception tree is drawn in `upstream._errors`.
"""

from upstream._elicit import ElicitCallback
from upstream._errors import (
    UpstreamAmbiguous,
    UpstreamCallTimeout,
    UpstreamClosed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamSessionLost,
    UpstreamUnavailable,
)
from upstream._health import UpstreamHealth, UpstreamState
from upstream._reconnect import Backoff
from upstream._relay import ProgressCallback
from upstream._settings import UpstreamSettings
from upstream._spawned import SpawnedProcess
from upstream._stderr import StderrCallback, StderrLine
from upstream._streams import DelegatingReadStream
from upstream._supervisor import ToolsChangedCallback
from upstream._surface import SurfaceCallback, SurfaceKind, SurfaceNotice
from upstream._surface_api import UpstreamSurface
from upstream._tasks import TasksEra, UpstreamTasks
from upstream._transport import SecretCallback
from upstream._upstream import Upstream

__all__ = [
    "Backoff",
    "DelegatingReadStream",
    "ElicitCallback",
    "ProgressCallback",
    "SecretCallback",
    "SpawnedProcess",
    "StderrCallback",
    "StderrLine",
    "SurfaceCallback",
    "SurfaceKind",
    "SurfaceNotice",
    "TasksEra",
    "ToolsChangedCallback",
    "Upstream",
    "UpstreamAmbiguous",
    "UpstreamCallTimeout",
    "UpstreamClosed",
    "UpstreamError",
    "UpstreamHealth",
    "UpstreamProtocolError",
    "UpstreamRejected",
    "UpstreamSessionLost",
    "UpstreamSettings",
    "UpstreamState",
    "UpstreamSurface",
    "UpstreamTasks",
    "UpstreamUnavailable",
]
