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
    MissingCapability,
    PolicyDenied,
    ProbeError,
    RemoteOpsError,
    RemoteShellError,
    TransportError,
    TransportLost,
    UnknownTarget,
    UnresolvedHost,
)
from ._exec import Carrier, ExecRequest, RawExec, RawStream
from ._files import PathArg, RemoteFiles
from ._files_errors import (
    FileAccessDenied,
    FileConflict,
    FileNotFound,
    FileRequestInvalid,
    ProtectedPath,
    RemoteFileError,
)
from ._files_models import (
    DeleteResult,
    FileContent,
    FileInfo,
    FileKind,
    GrepMatch,
    GrepResult,
    GrepSkipped,
    ListError,
    ListResult,
    MkdirResult,
    MoveResult,
    WriteResult,
)
from ._files_patch import Hunk, HunkResult, PatchResult
from ._models import (
    Capabilities,
    CarrierState,
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
from ._settings import CarrierMode, HostKeyPolicy, MultiplexMode, TargetSpec, TransportSettings

__all__ = [
    "CAPABILITY_TOOLS",
    "AuthError",
    "Capabilities",
    "Carrier",
    "CarrierMode",
    "CarrierState",
    "CommandTimeout",
    "ConnectError",
    "ConnectReason",
    "DeleteResult",
    "DiagnoseReport",
    "DiskUsage",
    "ExecRequest",
    "ExecResult",
    "FileAccessDenied",
    "FileConflict",
    "FileContent",
    "FileInfo",
    "FileKind",
    "FileNotFound",
    "FileRequestInvalid",
    "GrepMatch",
    "GrepResult",
    "GrepSkipped",
    "HostKeyError",
    "HostKeyPolicy",
    "Hunk",
    "HunkResult",
    "InvalidRequest",
    "ListError",
    "ListResult",
    "MissingCapability",
    "MkdirResult",
    "MoveResult",
    "MultiplexMode",
    "MultiplexState",
    "PatchResult",
    "PathArg",
    "PolicyDenied",
    "ProbeError",
    "ProtectedPath",
    "RawExec",
    "RawStream",
    "RemoteFileError",
    "RemoteFiles",
    "RemoteOps",
    "RemoteOpsError",
    "RemoteShellError",
    "RenderedCommand",
    "SectionError",
    "TargetIdentity",
    "TargetInfo",
    "TargetSpec",
    "TransportError",
    "TransportLost",
    "TransportSettings",
    "TransportStats",
    "UnknownTarget",
    "UnresolvedHost",
    "WriteResult",
    "render_command",
]
