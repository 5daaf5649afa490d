"""The acceptance report: one record per named phase, written as JSON and as Markdown.

A phase is ``passed``, ``failed``, ``skipped`` (always with the reason) or ``not_built`` (the capability has
not landed; never counted as passed). The run is ``ok`` when no phase failed and every skip names its reason.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = ["CleanupCheck", "PhaseResult", "Report", "Status"]


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_BUILT = "not_built"


@dataclass
class CleanupCheck:
    """One thing a phase created and verified gone afterwards."""

    what: str
    ok: bool
    detail: str = ""


@dataclass
class PhaseResult:
    name: str
    title: str
    status: Status
    duration_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    """Why a phase was skipped or is not built."""
    error: str | None = None
    """What failed (the first failed check, or the exception)."""
    cleanup: list[CleanupCheck] = field(default_factory=list)

    @property
    def cleanup_ok(self) -> bool:
        return all(check.ok for check in self.cleanup)


@dataclass
class Report:
    mode: str
    started_at: str
    finished_at: str = ""
    duration_s: float = 0.0
    environment: dict[str, Any] = field(default_factory=dict)
    phases: list[PhaseResult] = field(default_factory=list)
    final_cleanup: list[CleanupCheck] = field(default_factory=list)
    """Run-wide: every process the run started is gone, its directories are removed."""

    @property
    def counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in Status}
        for phase in self.phases:
            counts[phase.status.value] += 1
        return counts

    @property
    def ok(self) -> bool:
        return (
            all(p.status is not Status.FAILED for p in self.phases)
            and all(p.reason for p in self.phases if p.status in (Status.SKIPPED, Status.NOT_BUILT))
            and all(check.ok for check in self.final_cleanup)
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["counts"] = self.counts
        for phase, raw in zip(self.phases, data["phases"], strict=True):
            raw["cleanup_ok"] = phase.cleanup_ok
        return data

    def write(self, out_dir: Path) -> tuple[Path, Path]:
        """Write ``acceptance-report.json`` and ``acceptance-report.md`` into ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path = out_dir / "acceptance-report.json"
        md_path = out_dir / "acceptance-report.md"
        json_path.write_text(json.dumps(self.as_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        md_path.write_text(self.markdown(), encoding="utf-8")
        return json_path, md_path

    def markdown(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in self.counts.items() if n)
        lines = [
            f"# remoteops-gateway acceptance report ({self.mode})",
            "",
            f"- result: **{'OK' if self.ok else 'FAILED'}** ({counts})",
            f"- started {self.started_at}, finished {self.finished_at}, {self.duration_s:.1f} s",
        ]
        lines += [f"- {key}: {value}" for key, value in self.environment.items()]
        lines += ["", "| phase | status | s | figures |", "|---|---|---:|---|"]
        for p in self.phases:
            shown = p.reason if p.status in (Status.SKIPPED, Status.NOT_BUILT) else _short(p.figures)
            if p.figures.get("known_bugs"):
                shown = f"{shown}; KNOWN GATEWAY BUGS: {', '.join(p.figures['known_bugs'])}"
            status = p.status.value if p.cleanup_ok else f"{p.status.value} (cleanup FAILED)"
            lines.append(f"| `{p.name}` {p.title} | {status} | {p.duration_s:.1f} | {_cell(shown or '')} |")
        for p in self.phases:
            if p.status is Status.NOT_BUILT:
                continue
            lines += ["", f"## {p.name} — {p.status.value}", "", p.title, ""]
            if p.reason:
                lines.append(f"- reason: {p.reason}")
            if p.error:
                lines += ["- error:", "", "```", p.error.strip(), "```", ""]
            lines += [
                f"- `{key}`: {_cell(json.dumps(value, default=str))}" for key, value in p.figures.items()
            ]
            if p.cleanup:
                done = sum(check.ok for check in p.cleanup)
                lines.append(f"- cleanup verified: {done}/{len(p.cleanup)}")
                lines += [f"  - FAILED: {c.what} {c.detail}" for c in p.cleanup if not c.ok]
        if self.final_cleanup:
            lines += ["", "## run cleanup", ""]
            lines += [
                f"- {'ok' if c.ok else 'FAILED'}: {c.what} {c.detail}".rstrip() for c in self.final_cleanup
            ]
        return "\n".join(lines) + "\n"


def _short(figures: dict[str, Any], limit: int = 6) -> str:
    parts = []
    for key, value in list(figures.items())[:limit]:
        if isinstance(value, (dict, list)):
            continue
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
