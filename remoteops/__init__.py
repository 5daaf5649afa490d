"""remoteops: remote operations over native OpenSSH (ControlMaster pool). Knows nothing of MCP.

Plain async Python returning pydantic records and raising one exception tree (see ``remoteops._errors``).
The embedded demo/test target lives in :mod:`remoteops.embedded` (imported explicitly: it loads asyncssh)::

    settings = TransportSettings(ssh_config_file=cfg)
    async with RemoteOps(settings, [TargetSpec(name="web", host="web1")]) as ops:
        result = await ops.run("web", ["uname", "-a"])
"""

from ._capabilities import TOOLS as CAPABILITY_TOOLS
from ._errors import (
    AuthError,
    CommandTimeout,
    ConnectError,
    ConnectReason,
    HostKeyError,
    InvalidRequest,
    PolicyDenied,
    ProbeError,
    RemoteOpsError,
    RemoteShellError,
    TransportError,
    TransportLost,
    UnknownTarget,
    UnresolvedHost,
)
from ._exec import Carrier, ExecRequest
from ._forward_errors import ForwardConflict, ForwardError, ForwardNotFound, ForwardStartFailed
from ._forward_models import (
    ForwardCheck,
    ForwardClosed,
    ForwardCreated,
    ForwardHealth,
    ForwardKind,
    ForwardSettings,
    ForwardSpec,
    ForwardView,
)
from ._forward_store import StateForwardStore
from ._forwards import ForwardManager
from ._models import (
    Capabilities,
    DiagnoseReport,
    DiskUsage,
    ExecResult,
    MultiplexState,
    SectionError,
    TargetIdentity,
    TargetInfo,
    TransportStats,
)
from ._ops import RemoteOps
from ._render import RenderedCommand, render_command
from ._settings import HostKeyPolicy, MultiplexMode, TargetSpec, TransportSettings

__all__ = [
    "CAPABILITY_TOOLS",
    "AuthError",
    "Capabilities",
    "Carrier",
    "CommandTimeout",
    "ConnectError",
    "ConnectReason",
    "DiagnoseReport",
    "DiskUsage",
    "ExecRequest",
    "ExecResult",
    "ForwardCheck",
    "ForwardClosed",
    "ForwardConflict",
    "ForwardCreated",
    "ForwardError",
    "ForwardHealth",
    "ForwardKind",
    "ForwardManager",
    "ForwardNotFound",
    "ForwardSettings",
    "ForwardSpec",
    "ForwardStartFailed",
    "ForwardView",
    "HostKeyError",
    "HostKeyPolicy",
    "InvalidRequest",
    "MultiplexMode",
    "MultiplexState",
    "PolicyDenied",
    "ProbeError",
    "RemoteOps",
    "RemoteOpsError",
    "RemoteShellError",
    "RenderedCommand",
    "SectionError",
    "StateForwardStore",
    "TargetIdentity",
    "TargetInfo",
    "TargetSpec",
    "TransportError",
    "TransportLost",
    "TransportSettings",
    "TransportStats",
    "UnknownTarget",
    "UnresolvedHost",
    "render_command",
]
