"""The named-phase acceptance suite of a source checkout: ``python -m acceptance [--quick] [--out DIR]
[--only PHASE ...] [--list]`` (it is no subcommand of the installed gateway: the product does not import
its harness).

Exit status 0 when no phase failed (not_built and skipped-with-reason phases do not fail the run), else 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import anyio

from acceptance._registry import REGISTRY
from acceptance._runner import run_suite, selected_phases

__all__ = ["main"]

DEFAULT_OUT = Path(__file__).resolve().parents[1] / ".cache" / "acceptance"


DESCRIPTION = (
    "The named-phase acceptance suite: a real sshd, the real upstream and the gateway as a subprocess over "
    "HTTP; writes a JSON and a Markdown report. Exit status 0 when no phase failed, else 1."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acceptance", description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="small N for every phase (CI); skips nothing")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"report directory (default {DEFAULT_OUT})"
    )
    parser.add_argument("--only", nargs="+", default=(), metavar="PHASE", help="run only these phases")
    parser.add_argument("--list", action="store_true", help="list the phases and exit")
    args = parser.parse_args(argv)
    if args.list:
        selected_phases()
        for phase in REGISTRY:
            state = "not_built" if phase.run is None else "phase"
            print(f"{phase.name:22} {state:10} {phase.title}")
        return 0
    # SIGTERM/SIGHUP (a CI timeout, a closed terminal) unwind like Ctrl-C: every process the run started is
    # stopped and every directory removed on the way out.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.default_int_handler)
    report, json_path, md_path = anyio.run(
        lambda: run_suite(quick=args.quick, only=args.only, out_dir=args.out)
    )
    for result in report.phases:
        lines = (result.error or "").strip().splitlines()
        detail = result.reason or (lines[0] if lines else "")
        print(f"{result.status.value:9} {result.duration_s:6.1f}s  {result.name}  {detail}", file=sys.stderr)
    print(f"acceptance {'OK' if report.ok else 'FAILED'} in {report.duration_s:.1f}s: {json_path} {md_path}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
