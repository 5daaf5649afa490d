"""The package boundaries: import direction and each package's public surface."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "gateway": {"gateway", "upstream", "remoteops"},
    "upstream": {"upstream"},
    "remoteops": {"remoteops"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_only_go_in_the_allowed_direction(package: str) -> None:
    own = set(ALLOWED)
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path) & own:
            if name not in ALLOWED[package]:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_remoteops_and_upstream_know_nothing_of_mcp_serving() -> None:
    for path in (ROOT / "remoteops").rglob("*.py"):
        assert "mcp" not in _imports(path), path


PUBLIC = {
    "gateway": {"main"},
    "upstream": {
        "Backoff",
        "ElicitCallback",
        "ProgressCallback",
        "SecretCallback",
        "StderrCallback",
        "StderrLine",
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
        "UpstreamUnavailable",
    },
    "remoteops": {
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
    },
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_public_surface_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"
    assert set(exported) == PUBLIC[package], (
        "a change of the public surface must be deliberate: update PUBLIC"
    )
