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
from ._transfer import Transfers
from ._transfer_errors import (
    ChecksumMismatch,
    DestinationExists,
    FreeSpaceFloor,
    LocalPathDenied,
    MissingCapability,
    PathNotFound,
    TransferFailed,
    TransferPathError,
)
from ._transfer_models import (
    ItemChange,
    Leftover,
    SyncOptions,
    SyncResult,
    TransferHooks,
    TransferOptions,
    TransferResult,
    TransferSettings,
)

__all__ = [
    "CAPABILITY_TOOLS",
    "AuthError",
    "Capabilities",
    "Carrier",
    "ChecksumMismatch",
    "CommandTimeout",
    "ConnectError",
    "ConnectReason",
    "DestinationExists",
    "DiagnoseReport",
    "DiskUsage",
    "ExecRequest",
    "ExecResult",
    "FreeSpaceFloor",
    "HostKeyError",
    "HostKeyPolicy",
    "InvalidRequest",
    "ItemChange",
    "Leftover",
    "LocalPathDenied",
    "MissingCapability",
    "MultiplexMode",
    "MultiplexState",
    "PathNotFound",
    "PolicyDenied",
    "ProbeError",
    "RemoteOps",
    "RemoteOpsError",
    "RemoteShellError",
    "RenderedCommand",
    "SectionError",
    "SyncOptions",
    "SyncResult",
    "TargetIdentity",
    "TargetInfo",
    "TargetSpec",
    "TransferFailed",
    "TransferHooks",
    "TransferOptions",
    "TransferPathError",
    "TransferResult",
    "TransferSettings",
    "Transfers",
    "TransportError",
    "TransportLost",
    "TransportSettings",
    "TransportStats",
    "UnknownTarget",
    "UnresolvedHost",
    "render_command",
]
