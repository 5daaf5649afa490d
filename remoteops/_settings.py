"""Frozen configuration objects passed down from the composition root."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CarrierMode", "HostKeyPolicy", "MultiplexMode", "TargetSpec", "TransportSettings"]

MultiplexMode = Literal["off", "auto", "required"]
# how commands reach a target: a persistent agent (python3 on the target), one ssh process per call, or the
# agent where the target can run it and ssh elsewhere
CarrierMode = Literal["auto", "agent", "ssh"]
HostKeyPolicy = Literal["strict", "accept-new"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

LabelKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")]
LabelValue = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-/:@]{0,128}$")]


class TransportSettings(BaseModel):
    """How remoteops drives OpenSSH. Known-hosts handling stays in the ssh configuration."""

    model_config = _FROZEN

    ssh_binary: str = "ssh"
    ssh_config_file: Path | None = (
        None  # passed as ``-F``; None = OpenSSH's defaults (~/.ssh/config, /etc/ssh)
    )
    control_dir: Path | None = None  # private 0700 dir for master sockets; None = /tmp/rog-<uid>
    multiplex: MultiplexMode = "auto"
    max_masters: int = Field(default=32, ge=1, le=1024)
    max_channels_per_target: int = Field(default=8, ge=1, le=256)  # keep below sshd MaxSessions (10)
    connect_timeout_s: int = Field(default=10, ge=1, le=300)
    server_alive_interval_s: int = Field(default=15, ge=1, le=3600)
    server_alive_count_max: int = Field(default=3, ge=1, le=100)
    control_persist_s: float = Field(default=300, gt=0)  # idle masters are closed after this long
    master_check_idle_s: float = Field(
        default=1.0, ge=0
    )  # ``ssh -O check`` before reusing a master idle this long
    master_retry_after_s: float = Field(default=30, ge=0)  # auto mode: after a failed master start, go direct
    exec_timeout_default_s: float = Field(default=60, gt=0)
    exec_timeout_max_s: float = Field(default=3600, gt=0)
    kill_after_s: int = Field(default=5, ge=1, le=120)  # remote TERM -> KILL grace
    # per stream; head and tail are kept. 64 KiB keeps a whole result under the 1 MiB SSE event
    # limit of common MCP clients even when every byte needs JSON escaping.
    output_cap_bytes: int = Field(default=64 * 1024, ge=4096)
    capability_ttl_s: float = Field(default=120, ge=0)
    carrier: CarrierMode = "auto"
    agent_idle_s: float = Field(default=300, gt=0)  # an agent channel with nothing in flight is closed after
    # liveness (remoteops/agent/liveness.py): an agent not heard from for agent_probe_s is sent a PING; one
    # unanswered for agent_lost_after_s is stuck: its calls end as transport_lost, it is killed and replaced
    agent_probe_s: float = Field(default=5, gt=0)
    agent_lost_after_s: float = Field(default=15, gt=0)


class TargetSpec(BaseModel):
    """One allow-listed target. ``host`` is an ssh alias or host name handed to ssh."""

    model_config = _FROZEN

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")
    host: str = Field(pattern=r"^[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\[\]%-]{0,254}$")  # never a leading '-'
    user: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$")
    port: int | None = Field(default=None, ge=1, le=65535)
    host_key_policy: HostKeyPolicy = "strict"
    carrier: CarrierMode | None = None  # None: the transport's setting
    protected_paths: tuple[str, ...] = ()  # remote_delete refuses these (and directories holding them)
    # ``labels = {role = "web", env = "prod"}``: what fleet selectors match (``remoteops.fleet``)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=32)
