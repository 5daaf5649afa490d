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
from ._state import Collection, StateProblem, StateStore, atomic_write
from ._task_models import (
    CancelStep,
    TaskCancelResult,
    TaskCapabilityMissing,
    TaskConflict,
    TaskError,
    TaskHealth,
    TaskInfo,
    TaskMode,
    TaskNotFound,
    TaskOutput,
    TaskRemoteError,
    TaskSettings,
    TaskState,
    TaskStream,
    TaskWaitResult,
    WaitOutcome,
)
from ._tasks import RemoteTasks

__all__ = [
    "CAPABILITY_TOOLS",
    "AuthError",
    "CancelStep",
    "Capabilities",
    "Carrier",
    "CarrierMode",
    "CarrierState",
    "Collection",
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
    "MissingCapability",
    "MultiplexMode",
    "MultiplexState",
    "PolicyDenied",
    "ProbeError",
    "RawExec",
    "RawStream",
    "RemoteOps",
    "RemoteOpsError",
    "RemoteShellError",
    "RemoteTasks",
    "RenderedCommand",
    "SectionError",
    "StateForwardStore",
    "StateProblem",
    "StateStore",
    "TargetIdentity",
    "TargetInfo",
    "TargetSpec",
    "TaskCancelResult",
    "TaskCapabilityMissing",
    "TaskConflict",
    "TaskError",
    "TaskHealth",
    "TaskInfo",
    "TaskMode",
    "TaskNotFound",
    "TaskOutput",
    "TaskRemoteError",
    "TaskSettings",
    "TaskState",
    "TaskStream",
    "TaskWaitResult",
    "TransportError",
    "TransportLost",
    "TransportSettings",
    "TransportStats",
    "UnknownTarget",
    "UnresolvedHost",
    "WaitOutcome",
    "atomic_write",
    "render_command",
]
