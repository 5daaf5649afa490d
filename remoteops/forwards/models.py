"""Records of managed SSH port forwards: what was asked for, the process that carries it, its health.

Kinds (OpenSSH option, where the listener is, who connects to the destination)::

    local   -L  listener on the gateway side   the target connects to dest_host:dest_port
    remote  -R  listener on the target         the gateway side connects to dest_host:dest_port
    dynamic -D  listener on the gateway side   SOCKS5; the target connects wherever the client asks
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CheckName",
    "ForwardCheck",
    "ForwardClosed",
    "ForwardCreated",
    "ForwardHealth",
    "ForwardKind",
    "ForwardRecord",
    "ForwardSettings",
    "ForwardSpec",
    "ForwardState",
    "ForwardView",
    "ProcessIdentity",
    "is_loopback",
]

ForwardKind = Literal["local", "remote", "dynamic"]
CheckName = Literal["process", "local_listener", "socks_handshake", "remote_listener"]
ForwardState = Literal["active", "lost"]
Port = Annotated[int, Field(ge=1, le=65535)]

_FROZEN = ConfigDict(extra="forbid", frozen=True)
# Checked by validators rather than schema ``pattern``s: the gateway publishes this model as the arguments
# of forward_create, and its schema stays plain JSON Schema.
_ADDRESS = re.compile(r"^[A-Za-z0-9.:\[\]_-]+$")


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


class ForwardSettings(BaseModel):
    """The ``[forwards]`` configuration section."""

    model_config = _FROZEN

    allowed_bind_addresses: tuple[str, ...] = ()
    """Non-loopback bind addresses a forward may listen on (gateway side for local/dynamic, the target
    for remote; a remote one also needs ``GatewayPorts`` in the target's sshd). Loopback is always allowed."""
    start_timeout_s: Annotated[float, Field(gt=0, le=120)] = 20.0
    """Ceiling for a forward's ssh to connect and confirm every listener (``ExitOnForwardFailure``)."""
    close_grace_s: Annotated[float, Field(gt=0, le=60)] = 3.0
    """Wait after SIGTERM before SIGKILL (the identity is checked again first)."""
    check_timeout_s: Annotated[float, Field(gt=0, le=60)] = 5.0
    """Ceiling for each health check (TCP connect, SOCKS handshake, ``ss`` on the target)."""


class ForwardSpec(BaseModel):
    """What a caller asks for. ``bind_port=None`` picks a free port (reported in the record)."""

    model_config = _FROZEN

    target: str = Field(min_length=1, max_length=128, description="A configured target name.")
    kind: ForwardKind = Field(
        description="local (-L: listen here, the target connects to dest), remote (-R: listen on the "
        "target, this side connects to dest), dynamic (-D: a SOCKS5 proxy here, exits via the target)."
    )
    bind_address: str = Field(
        "127.0.0.1",
        min_length=1,
        max_length=255,
        description="Listen address (this side for local/dynamic, the target for remote). Loopback unless "
        "the operator allowed another in forwards.allowed_bind_addresses.",
    )
    bind_port: Port | None = Field(None, description="Listen port; omitted: a free one.")
    dest_host: str | None = Field(
        None, min_length=1, max_length=255, description="Destination host (local/remote forwards)."
    )
    dest_port: Port | None = None

    @field_validator("bind_address", "dest_host")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not _ADDRESS.match(value):
            raise ValueError("must be a host name or an IP address")
        return value

    @model_validator(mode="after")
    def _destination(self) -> Self:
        has_dest = self.dest_host is not None or self.dest_port is not None
        if self.kind == "dynamic" and has_dest:
            raise ValueError("a dynamic (SOCKS) forward takes no dest_host/dest_port")
        if self.kind != "dynamic" and (self.dest_host is None or self.dest_port is None):
            raise ValueError(f"a {self.kind} forward needs dest_host and dest_port")
        return self


class ProcessIdentity(BaseModel):
    """Who the forward's process is: a PID alone can be recycled, these four together cannot."""

    model_config = _FROZEN

    pid: int
    start_ticks: int = Field(description="Field 22 of /proc/PID/stat (clock ticks after boot).")
    boot_id: str = Field(description="/proc/sys/kernel/random/boot_id when it was recorded.")
    argv: tuple[str, ...] = Field(description="The exact argv (/proc/PID/cmdline).")


class ForwardCheck(BaseModel):
    model_config = _FROZEN

    name: CheckName
    ok: bool | None = Field(description="None: the check could not be made (detail says why).")
    detail: str = ""
    duration_ms: float = 0.0


class ForwardHealth(BaseModel):
    model_config = _FROZEN

    checked_at: str
    healthy: bool
    checks: list[ForwardCheck]


class ForwardRecord(BaseModel):
    """One managed forward, as kept in the state store (only written once its start was confirmed)."""

    model_config = _FROZEN

    id: str
    name: str | None = None
    spec: ForwardSpec = Field(description="As requested (bind_port None = picked).")
    bind_port: int = Field(description="The port actually listening (picked or requested).")
    state: ForwardState = "active"
    lost_reason: str | None = None
    process: ProcessIdentity
    log_path: str
    created_at: str
    gateway_pid: int = Field(description="The gateway process that started it.")
    last_health: ForwardHealth | None = None


class ForwardView(BaseModel):
    """A forward as tools show it."""

    model_config = _FROZEN

    id: str
    name: str | None
    target: str
    kind: ForwardKind
    bind_address: str
    bind_port: int
    dest_host: str | None
    dest_port: int | None
    state: ForwardState
    lost_reason: str | None
    pid: int
    created_at: str
    adopted: bool = Field(description="Started by an earlier gateway process and adopted by this one.")
    last_health: ForwardHealth | None

    @classmethod
    def of(cls, record: ForwardRecord, *, adopted: bool) -> ForwardView:
        s = record.spec
        return cls(
            id=record.id,
            name=record.name,
            target=s.target,
            kind=s.kind,
            bind_address=s.bind_address,
            bind_port=record.bind_port,
            dest_host=s.dest_host,
            dest_port=s.dest_port,
            state=record.state,
            lost_reason=record.lost_reason,
            pid=record.process.pid,
            created_at=record.created_at,
            adopted=adopted,
            last_health=record.last_health,
        )


class ForwardCreated(BaseModel):
    model_config = _FROZEN

    forward: ForwardView
    reused: bool = Field(description="A healthy forward of that name and specification was returned.")


class ForwardClosed(BaseModel):
    model_config = _FROZEN

    id: str
    state_before: ForwardState
    outcome: Literal["terminated", "killed", "not_running", "identity_mismatch", "survived"] = Field(
        description="terminated/killed: stopped by us; not_running: it had already exited; "
        "identity_mismatch: the PID belongs to another process now and was NOT signalled; "
        "survived: still running after SIGKILL (the record is kept)."
    )
    signalled: bool
    record_removed: bool
