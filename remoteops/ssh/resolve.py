"""Target resolution through ``ssh -G``: what ssh will actually connect to, as whom, through which hops."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import anyio

from remoteops._capture import HeadTail
from remoteops._errors import ConnectError, UnknownTarget
from remoteops._models import TargetIdentity
from remoteops._process import run_process
from remoteops._settings import TargetSpec, TransportSettings
from remoteops.ssh.args import SshArgs

__all__ = ["IdentityResolver", "parse_ssh_g"]

_RESOLVE_S = 10.0


def parse_ssh_g(text: str) -> TargetIdentity:
    single: dict[str, str] = {}
    identity_files: list[str] = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        key = key.lower()
        if key == "identityfile":
            identity_files.append(value)
        elif key and key not in single:
            single[key] = value
    if "hostname" not in single or "user" not in single:
        raise ValueError("ssh -G output lacks hostname/user")
    jump = single.get("proxyjump", "none")
    proxycommand = single.get("proxycommand")
    fields = {
        "user": single["user"],
        "hostname": single["hostname"],
        "port": int(single.get("port", "22")),
        "proxyjump": tuple(hop for hop in jump.split(",") if hop and jump != "none"),
        "proxycommand": None if proxycommand in (None, "none") else proxycommand,
        "identity_files": tuple(identity_files),
        "host_key_alias": single.get("hostkeyalias"),
    }
    digest_input = {**fields, "known_hosts": single.get("userknownhostsfile")}
    identity_hash = hashlib.sha256(json.dumps(digest_input, sort_keys=True).encode()).hexdigest()[:24]
    return TargetIdentity.model_validate({**fields, "identity_hash": identity_hash})


def _config_signature(settings: TransportSettings) -> tuple[tuple[str, int, int], ...]:
    """Stat of the ssh configuration files: when it changes, identities are resolved again."""
    if settings.ssh_config_file is not None:
        paths = [settings.ssh_config_file]
    else:
        paths = [Path.home() / ".ssh" / "config", Path("/etc/ssh/ssh_config")]
    sig: list[tuple[str, int, int]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            sig.append((str(path), -1, -1))
        else:
            sig.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(sig)


class IdentityResolver:
    """Resolves (and caches, until the ssh configuration changes) the identity of each target."""

    def __init__(self, settings: TransportSettings) -> None:
        self._settings = settings
        self._args = SshArgs(settings)
        self._cache: dict[str, tuple[tuple[tuple[str, int, int], ...], TargetIdentity]] = {}

    async def resolve(self, target: TargetSpec) -> TargetIdentity:
        signature = _config_signature(self._settings)
        hit = self._cache.get(target.name)
        if hit is not None and hit[0] == signature:
            return hit[1]
        try:
            with anyio.fail_after(_RESOLVE_S):
                outcome = await run_process(
                    self._args.resolve(target),
                    stdin=None,
                    stdout=HeadTail(1 << 20, 0),
                    stderr=HeadTail(8192, 0),
                )
        except TimeoutError as exc:  # a busy gateway host, not a name OpenSSH cannot resolve: worth a retry
            raise ConnectError(
                f"ssh -G did not answer within {_RESOLVE_S:g} s",
                target=target.name,
                stage="resolve",
                reason="timeout",
            ) from exc
        except OSError as exc:
            raise UnknownTarget(f"ssh -G failed: {exc}", target=target.name) from exc
        stderr = outcome.stderr.head.decode(errors="replace").strip()
        if outcome.returncode != 0:
            raise UnknownTarget(stderr[-600:] or "ssh -G failed", target=target.name)
        try:
            identity = parse_ssh_g(outcome.stdout.head.decode(errors="replace"))
        except ValueError as exc:
            raise UnknownTarget(str(exc), target=target.name) from exc
        self._cache[target.name] = (signature, identity)
        return identity
