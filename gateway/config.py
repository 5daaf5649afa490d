"""Configuration: one frozen settings model, read in exactly one place.

Sources, later wins: built-in defaults → TOML file (``--config PATH``, ``$REMOTEOPS_GATEWAY_CONFIG``, or
``~/.config/remoteops-gateway/gateway.toml`` when it exists) →
environment overrides ``REMOTEOPS_GATEWAY__SECTION__KEY=value`` (value parsed as JSON when it parses,
else taken as a string). Unknown keys are errors that name the key and the file or variable.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway._errors import ConfigError
from remoteops import (
    FleetSettings,
    ForwardSettings,
    GroupMember,
    PrivilegeSettings,
    SessionSettings,
    TargetSpec,
    TaskSettings,
    TransferSettings,
    TransportSettings,
    check_groups,
)
from upstream import UpstreamSettings

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_SCOPES",
    "ENV_PREFIX",
    "ApprovalRule",
    "ApprovalSettings",
    "AuditSettings",
    "AuditShipSettings",
    "AuthSettings",
    "ConsoleSettings",
    "McpTaskSettings",
    "OAuthSettings",
    "RootSettings",
    "ServerSettings",
    "Settings",
    "SystemSettings",
    "TargetGrant",
    "ToolSettings",
    "TrustedProxySettings",
    "UpstreamEntry",
    "default_config_path",
    "default_state_dir",
    "load_settings",
]

CONFIG_ENV = "REMOTEOPS_GATEWAY_CONFIG"
ENV_PREFIX = "REMOTEOPS_GATEWAY__"

_FROZEN = ConfigDict(extra="forbid", frozen=True)

GroupName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/remoteops-gateway`` (or ``~/.local/state/remoteops-gateway``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "remoteops-gateway"


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _no_duplicates(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} name {name!r}")
        seen.add(name)


class ServerSettings(BaseModel):
    model_config = _FROZEN

    name: str = "remoteops-gateway"
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8765
    path: str = "/mcp"
    allowed_hosts: tuple[str, ...] = ()
    """Host header allow-list (``host:port``, ``host:*``); empty = loopback names only."""
    allowed_origins: tuple[str, ...] = ()
    """Origin allow-list; empty = loopback origins only. A missing Origin header is always allowed."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024
    max_argument_bytes: Annotated[int, Field(ge=64)] = 64 * 1024
    drain_timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0
    stateless_http: bool = False

    @field_validator("path")
    @classmethod
    def _path_is_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


DEFAULT_SCOPES: Mapping[str, tuple[str, ...]] = {
    "remoteops:inspect": ("inspect",),
    "remoteops:manage": ("manage",),
    "remoteops:execute": ("execute",),
    "remoteops:teardown": ("teardown",),
    "remoteops:root": ("root",),
    "remoteops:upstream": ("upstream",),
}
"""OAuth scope → the toolsets it opens (``auth.scopes``)."""

_NEVER_ALGORITHMS = frozenset({"none", "HS256", "HS384", "HS512"})


class OAuthSettings(BaseModel):
    """The authorization server whose access tokens ``auth.mode = "oauth"`` accepts."""

    model_config = _FROZEN

    issuer: str = ""
    """Exact ``iss`` of the tokens; named as the authorization server in the RFC 9728 metadata."""
    resource: str = ""
    """This gateway's public resource URL (RFC 8707 audience); empty = the served URL."""
    jwks_url: str = ""
    """Where the issuer's signing keys are (JWT access tokens)."""
    introspection_url: str = ""
    """RFC 7662 endpoint, used for tokens that are not JWTs (or always, when ``jwks_url`` is empty)."""
    introspection_client_id: str = ""
    introspection_secret_file: Path | None = None
    """File (0600) holding the client secret for introspection (HTTP basic auth)."""
    algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
    leeway_s: Annotated[float, Field(ge=0, le=300)] = 30.0
    jwks_min_refresh_s: Annotated[float, Field(ge=1, le=3600)] = 30.0
    """At most one JWKS fetch per this interval, however many unknown ``kid`` values arrive."""
    jwks_max_age_s: Annotated[float, Field(ge=60, le=86400)] = 3600.0
    introspection_cache_max: Annotated[int, Field(ge=0, le=100_000)] = 1024
    introspection_cache_max_s: Annotated[float, Field(ge=0, le=3600)] = 300.0
    introspection_negative_cache_s: Annotated[float, Field(ge=0, le=300)] = 5.0
    """How long a refused token (inactive, or not for this resource) is refused without asking again."""
    http_timeout_s: Annotated[float, Field(gt=0, le=60)] = 5.0
    group_claim: str = "groups"
    """Claim holding the caller's groups (for ``auth.grants[].group``)."""

    @field_validator("issuer", "resource", "jwks_url", "introspection_url")
    @classmethod
    def _https_or_loopback(cls, value: str) -> str:
        """Keys and token answers come over HTTPS; plain HTTP only to a loopback authorization server."""
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme == "https" and parts.hostname:
            return value
        if parts.scheme == "http" and _is_loopback(parts.hostname):
            return value
        raise ValueError("must be an https:// URL (http:// only on loopback)")

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = sorted(set(value) & _NEVER_ALGORITHMS)
        if bad:
            raise ValueError(f"algorithm(s) {', '.join(bad)} never accepted (no 'none', no shared secret)")
        if not value:
            raise ValueError("at least one algorithm is needed")
        return value


class TargetGrant(BaseModel):
    """Restricts the callers matching ``subject`` or ``group`` to ``targets``."""

    model_config = _FROZEN

    subject: str = ""
    group: str = ""
    targets: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_selector(self) -> Self:
        if bool(self.subject) == bool(self.group):
            raise ValueError("a grant names exactly one of subject or group")
        return self


class TrustedProxySettings(BaseModel):
    """Identity headers of an authenticating proxy in front: only from these peers, with the secret."""

    model_config = _FROZEN

    peers: tuple[str, ...] = ()
    """Loopback addresses the proxy connects from; empty = no proxy is trusted."""
    secret_file: Path | None = None
    """File (0600) holding the shared secret the proxy sends in ``secret_header``."""
    secret_header: str = "X-Remoteops-Proxy-Secret"  # noqa: S105 - a header name, not a secret
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    scopes: tuple[str, ...] = ("remoteops:inspect",)
    """Scopes a proxied caller gets (the proxy authenticates; it does not carry scopes)."""

    @model_validator(mode="after")
    def _peers_need_the_secret(self) -> Self:
        if self.peers and self.secret_file is None:
            raise ValueError("auth.trusted_proxy.peers needs auth.trusted_proxy.secret_file")
        return self

    @field_validator("peers")
    @classmethod
    def _loopback_only(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for peer in value:
            try:
                loopback = ipaddress.ip_address(peer).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(f"trusted proxy peer {peer!r} is not a loopback IP address")
        return value


class AuthSettings(BaseModel):
    model_config = _FROZEN

    mode: Literal["bearer", "oauth", "none"] = "bearer"
    token_file: Path | None = None
    """Bearer token file; generated (0600) under the state directory on first run when unset."""
    allow_no_auth: bool = False
    """Must be true (and the bind loopback) for ``mode = "none"`` — turning auth off is explicit."""
    oauth: OAuthSettings = OAuthSettings()
    scopes: Mapping[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_SCOPES))
    """OAuth scope → toolsets it opens."""
    grants: tuple[TargetGrant, ...] = ()
    """When non-empty, an OAuth or proxied caller reaches only the targets of the grants it matches."""
    trusted_proxy: TrustedProxySettings = TrustedProxySettings()

    @model_validator(mode="after")
    def _oauth_complete(self) -> Self:
        if self.mode == "oauth":
            if not self.oauth.issuer:
                raise ValueError("auth.mode = 'oauth' needs auth.oauth.issuer")
            if not (self.oauth.jwks_url or self.oauth.introspection_url):
                raise ValueError("auth.mode = 'oauth' needs auth.oauth.jwks_url or .introspection_url")
        return self


class AuditShipSettings(BaseModel):
    """``[audit.ship]``: audit records also POSTed to a collector (``gateway.audit.ship``)."""

    model_config = _FROZEN

    url: str = ""
    """The collector's endpoint (https, or http on loopback only); empty = no shipping."""
    bearer_token_file: Path | None = None
    """File (0600) holding the bearer token sent to the collector."""
    spool_max_bytes: Annotated[int, Field(ge=64 * 1024)] = 64 * 1024 * 1024
    """Records waiting for the collector, on disk under ``<state_dir>/audit-spool``, at most this much."""
    when_full: Literal["drop_oldest", "refuse_new"] = "drop_oldest"
    """What a full spool gives up: its oldest undelivered records, or the new ones (both counted)."""
    batch_records: Annotated[int, Field(ge=1, le=10_000)] = 200
    batch_max_bytes: Annotated[int, Field(ge=4096, le=64 * 1024 * 1024)] = 1024 * 1024
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    """Ceiling of one POST."""
    backoff_initial_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    backoff_max_s: Annotated[float, Field(gt=0, le=3600)] = 30.0

    @field_validator("url")
    @classmethod
    def _https_or_loopback(cls, value: str) -> str:
        """Records travel over HTTPS; plain HTTP only to a collector on loopback. No credentials in it."""
        if not value:
            return value
        parts = urlsplit(value)
        if parts.username is not None or parts.password is not None:
            raise ValueError("no credentials in the URL (use bearer_token_file)")
        if (parts.scheme == "https" and parts.hostname) or (
            parts.scheme == "http" and _is_loopback(parts.hostname)
        ):
            return value
        raise ValueError("must be an https:// URL (http:// only on loopback)")


class AuditSettings(BaseModel):
    model_config = _FROZEN

    path: Path | None = None
    """JSONL audit file; defaults to ``<state_dir>/audit.jsonl``."""
    max_bytes: Annotated[int, Field(ge=4096)] = 10 * 1024 * 1024
    backups: Annotated[int, Field(ge=0, le=100)] = 3
    key_file: Path | None = None
    """The audit chain's MAC key (64 hex, 0600), e.g. a systemd ``LoadCredential`` file; never created.
    Unset: ``<state_dir>/audit.key``, made on first start (``docs/audit.md``)."""
    ship: AuditShipSettings = AuditShipSettings()


class RedactionSettings(BaseModel):
    """``[redaction]``: what is scrubbed beyond logs, audit and errors (which always are)."""

    model_config = _FROZEN

    output: Literal["off", "mask"] = "off"
    """``mask``: command and file output returned to the client is scanned for the credential shapes
    (``gateway._redact``) and masked, counted in the result's ``_meta`` (``remoteops-gateway/redacted``)
    and the audit record; byte-exact reads (``encoding = "base64"``) are never altered and say so."""


class ToolSettings(BaseModel):
    model_config = _FROZEN

    toolsets: tuple[str, ...] = ("inspect", "manage", "execute", "upstream")
    include: tuple[str, ...] = ()
    """Extra own tools enabled although their toolset is not."""
    exclude: tuple[str, ...] = ()
    """Own tools disabled although their toolset is enabled."""


class SystemSettings(BaseModel):
    """``[system]``: bounds of the system inspection tools."""

    model_config = _FROZEN

    process_list_max: Annotated[int, Field(ge=1, le=10_000)] = 1000
    """The ceiling of ``process_list``'s ``limit``."""


class RootSettings(PrivilegeSettings):
    """``[root]``: which targets ``remote_root_exec`` may raise to root, how, and how a human enters a
    password (the one-time page, an askpass command). Empty ``targets``: no target is root-allowed."""

    model_config = _FROZEN

    targets: tuple[str, ...] = ()
    """The root allow-list: configured target names. Any other target is ``policy_denied``, unconnected."""
    askpass_command: tuple[str, ...] = ()
    """argv on the gateway host whose first stdout line is the password (``ROG_TARGET``, ``ROG_ACCOUNT``,
    ``ROG_PROVIDER``, ``ROG_LOGIN`` in its environment); tried before asking the human through the page."""
    askpass_timeout_s: Annotated[float, Field(gt=0, le=600)] = 60.0
    secret_ttl_s: Annotated[float, Field(ge=1, le=600)] = 120.0
    """Lifetime of a one-time entry link, and of an entered password waiting for its one use."""
    entry_port: Annotated[int, Field(ge=0, le=65535)] = 0
    """stdio mode: port of the loopback-only listener opened for the entry page (0: any free port)."""


class McpTaskSettings(BaseModel):
    """``[mcp_tasks]``: long tool calls answered with a durable task handle (the MCP Tasks extension,
    ``io.modelcontextprotocol/tasks``; the 2025-11-25 tasks utility before it). ``docs/mcp-tasks.md``."""

    model_config = _FROZEN

    enabled: bool = True
    """Advertise tasks and answer eligible calls of declaring clients with a task handle."""
    threshold_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    """A call whose ``timeout_s`` is at least this long becomes a task (``remote_exec``, ``task_wait``...)."""
    always: tuple[str, ...] = (
        "exec_many",
        "upload_many",
        "remote_upload",
        "remote_download",
        "remote_sync",
        "admin_transaction",
        "task_wait",
        "session_wait_for",
    )
    """Tools that always become a task for a declaring client (names of tools not served are ignored)."""
    ttl_s: Annotated[float, Field(ge=60, le=30 * 86_400)] = 86_400.0
    """How long a task and its result are kept after creation (a 2025-11-25 client may ask for less)."""
    poll_interval_ms: Annotated[int, Field(ge=100, le=600_000)] = 1000
    """The polling interval suggested to clients."""
    max_active_per_principal: Annotated[int, Field(ge=1, le=10_000)] = 64
    """Tasks one caller may have working at once; beyond it calls run inline as before."""


class ApprovalRule(BaseModel):
    """One ``[[approvals.rules]]`` entry: a call matching it waits for a human's decision.

    Every non-empty field must match (within a field, any value does): ``toolsets`` and ``tools`` by name,
    ``targets`` and ``principals`` as globs (``prod-*``; a principal by label ``oauth:alice`` or subject),
    ``paths`` as path prefixes of the call's path arguments (``/etc`` covers ``/etc`` and ``/etc/...``).
    A rule naming targets (or paths) also matches a call that names none: fail closed."""

    model_config = _FROZEN

    name: str = ""
    """Shown to the human and in the audit record (default: the rule's position)."""
    toolsets: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    principals: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not (self.toolsets or self.tools or self.targets or self.principals or self.paths):
            raise ValueError(
                "an approval rule names at least one of toolsets, tools, targets, principals, paths"
            )
        for prefix in self.paths:
            if not prefix.startswith("/"):
                raise ValueError(f"approval path prefix {prefix!r} must be absolute")
        return self


class ApprovalSettings(BaseModel):
    """``[approvals]``: which calls wait for a human operator's decision, and for how long."""

    model_config = _FROZEN

    rules: tuple[ApprovalRule, ...] = ()
    timeout_s: Annotated[float, Field(gt=0, le=86400)] = 300.0
    """How long a call (or its approval link) waits for the decision; then ``approval_timeout``."""
    progress_interval_s: Annotated[float, Field(gt=0, le=60)] = 5.0
    """A waiting call sends an MCP progress notification this often (clients keep it alive)."""
    wait_without_elicitation: bool = False
    """A client without URL elicitation: false = the call fails at once with the link (``approval_required``,
    retry after the decision, like the password page); true = it waits (the human uses the console)."""


class ConsoleSettings(BaseModel):
    """``[console]``: the operator console and the approval pages on the gateway's HTTP listener."""

    model_config = _FROZEN

    operator_token_file: Path | None = None
    """The static operator token (0600; never an argument): presented once on the login form. Unset:
    ``<state_dir>/operator-token``, generated on first start. Never the same as the bearer token."""
    operator_group: str = "operator"
    """A trusted-proxy identity in this group is an operator without the token."""
    session_ttl_s: Annotated[float, Field(ge=60, le=86400)] = 8 * 3600.0
    recent_calls: Annotated[int, Field(ge=1, le=1000)] = 50
    """Calls kept in memory for the console's live list."""
    task_tail_bytes: Annotated[int, Field(ge=64, le=65536)] = 2048
    secure_cookies: bool | None = None
    """The session cookie's ``Secure`` flag: None = when the request came over https; true = always
    (behind a TLS-terminating proxy, where the gateway itself sees http)."""


class UpstreamEntry(BaseModel):
    """One relayed upstream: its connection settings plus the gateway-side gating of its tools."""

    model_config = _FROZEN

    connection: UpstreamSettings
    include: tuple[str, ...] = ()
    """When non-empty, only these relayed tool names are served."""
    exclude: tuple[str, ...] = ()
    prefix: str = ""
    """Prepended to every relayed name (e.g. ``"term_"``); empty keeps upstream names unchanged."""
    on_collision: Literal["prefer_own", "prefix_upstream"] = "prefer_own"
    audit_arguments: Literal["digest", "clear"] = "digest"
    """Relayed tool arguments in the audit: each value's length and hash prefix, or (operator opt-in)
    the values themselves, redacted like own tools' arguments."""
    """A relayed name equal to an own tool: drop it (``prefer_own``) or serve it as ``upstream_<name>``."""


class Settings(BaseModel):
    model_config = _FROZEN

    state_dir: Path = Field(default_factory=default_state_dir)
    server: ServerSettings = ServerSettings()
    auth: AuthSettings = AuthSettings()
    audit: AuditSettings = AuditSettings()
    redaction: RedactionSettings = RedactionSettings()
    tools: ToolSettings = ToolSettings()
    transport: TransportSettings = TransportSettings()
    tasks: TaskSettings = TaskSettings()
    mcp_tasks: McpTaskSettings = McpTaskSettings()
    sessions: SessionSettings = SessionSettings()
    transfers: TransferSettings = TransferSettings()
    forwards: ForwardSettings = ForwardSettings()
    system: SystemSettings = SystemSettings()
    root: RootSettings = RootSettings()
    fleet: FleetSettings = FleetSettings()
    approvals: ApprovalSettings = ApprovalSettings()
    console: ConsoleSettings = ConsoleSettings()
    targets: tuple[TargetSpec, ...] = ()
    groups: Mapping[GroupName, tuple[GroupMember, ...]] = Field(default_factory=dict)
    """``[groups]``: named groups of targets for the fleet tools: target names and/or ``{labels = {...}}``."""
    upstreams: tuple[UpstreamEntry, ...] = ()
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("targets")
    @classmethod
    def _unique_targets(cls, value: tuple[TargetSpec, ...]) -> tuple[TargetSpec, ...]:
        _no_duplicates([t.name for t in value], "target")
        return value

    @field_validator("groups")
    @classmethod
    def _groups_name_targets(
        cls, value: Mapping[str, tuple[GroupMember, ...]], info: ValidationInfo
    ) -> Mapping[str, tuple[GroupMember, ...]]:
        check_groups(value, info.data.get("targets", ()))
        return value

    @model_validator(mode="after")
    def _root_targets_configured(self) -> Self:
        known = {t.name for t in self.targets}
        unknown = [name for name in self.root.targets if name not in known]
        if unknown:
            raise ValueError(f"root.targets names targets that are not configured: {', '.join(unknown)}")
        return self

    @field_validator("upstreams")
    @classmethod
    def _unique_upstreams(cls, value: tuple[UpstreamEntry, ...]) -> tuple[UpstreamEntry, ...]:
        _no_duplicates([u.connection.name for u in value], "upstream")
        return value

    @property
    def audit_path(self) -> Path:
        return self.audit.path or self.state_dir / "audit.jsonl"

    @property
    def audit_key_path(self) -> Path:
        return self.audit.key_file or self.state_dir / "audit.key"

    @property
    def token_path(self) -> Path:
        return self.auth.token_file or self.state_dir / "token"

    @property
    def operator_token_path(self) -> Path:
        return self.console.operator_token_file or self.state_dir / "operator-token"


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Nested dict from ``REMOTEOPS_GATEWAY__A__B=v`` plus a map dotted-key → variable name."""
    tree: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not parts:
            raise ConfigError("empty key", source=f"${name}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError("conflicting override", source=f"${name}", key=".".join(parts))
        node[parts[-1]] = value
        origin[".".join(parts)] = f"${name}"
    return tree, origin


def _source_of(loc: tuple[str | int, ...], env_origin: Mapping[str, str], file: str | None) -> str:
    dotted = ".".join(str(p) for p in loc)
    for key, var in env_origin.items():
        if dotted == key or dotted.startswith(key + "."):
            return var
    return file or "defaults"


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/remoteops-gateway/gateway.toml``; ``$XDG_CONFIG_HOME`` defaults to ``~/.config``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "remoteops-gateway" / "gateway.toml"


def load_settings(
    path: Path | None = None, environ: Mapping[str, str] | None = None, *, search: bool = False
) -> Settings:
    """The one place configuration is read. Raises ConfigError naming the key and its source.

    The file: ``path``, else ``$REMOTEOPS_GATEWAY_CONFIG``, else (``search``: the command line) the
    :func:`default_config_path` when it exists, else none (built-in defaults)."""
    env = os.environ if environ is None else environ
    if path is None and env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV])
    if path is None and search and default_config_path(env).is_file():
        path = default_config_path(env)
    data: dict[str, Any] = {}
    file_label: str | None = None
    if path is not None:
        file_label = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("configuration file not found", source=file_label) from None
        except IsADirectoryError:
            raise ConfigError("is a directory, not a configuration file", source=file_label) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"not UTF-8 text (byte {exc.start}): TOML files are UTF-8", source=file_label
            ) from None
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror or exc}", source=file_label) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"invalid TOML: {exc}", source=file_label) from None
    overrides, env_origin = _env_overrides(env)
    data = _merge(data, overrides)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            dotted = ".".join(str(p) for p in loc)
            kind = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
            problems.append(ConfigError(kind, source=_source_of(loc, env_origin, file_label), key=dotted))
        raise ConfigError.of(problems) from None
