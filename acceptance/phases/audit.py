"""Audit chain: ``remoteops-gateway audit verify`` passes on the audit log the run wrote — every gateway's,
across the restarts earlier phases made — and fails, naming the record, on tampered copies of the main
gateway's log (one edited byte, a deleted record, two swapped records, a cut tail). A clean copy verifies
too (the control: the copy itself changes nothing).

The main gateway's log and one tampered copy go through the command line as an operator runs it (exit
status 0 and 1, the JSON report); the other logs and copies through the function it calls
(``gateway.audit.verify.verify_files``, with each gateway's own settings), in-process: one interpreter
start-up per check took ~9 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from acceptance._registry import PhaseContext, phase
from acceptance.harness.gateway_proc import GatewayProcess
from acceptance.phases._util import wait_until
from gateway.audit.chain import load_key, parse_sealed
from gateway.audit.verify import verify_files
from gateway.config import load_settings

__all__ = ["audit"]

_VERIFY_S = 120.0


def _verify(args: list[str]) -> tuple[int, dict[str, Any], float]:
    """``audit verify`` as a subprocess: exit status, its JSON report, seconds."""
    argv = [sys.executable, "-m", "gateway", "audit", "verify", *args]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=_VERIFY_S, check=False)
    elapsed = time.monotonic() - started
    try:
        report = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        report = {"unparsed_stdout": done.stdout[-2000:]}
    report.setdefault("stderr", done.stderr[-2000:])
    return done.returncode, report, elapsed


def _verify_here(config: Path | None, args: dict[str, Path]) -> tuple[int, dict[str, Any], float]:
    """What ``audit verify [--config C] [--from F --key K --head H]`` decides, in-process."""
    started = time.monotonic()
    if config is not None:
        settings = load_settings(config, environ={})
        audit_file, key_file = settings.audit_path, settings.audit_key_path
        head, backups = settings.state_dir / "audit.head", settings.audit.backups
    else:
        audit_file, key_file, head, backups = args["from"], args["key"], args["head"], None
    report = verify_files(audit_file, load_key(key_file, create=False), head_file=head, backups=backups)
    return (0 if report.ok else 1), report.as_dict(), time.monotonic() - started


def _caught_up(audit_file: Path, head_file: Path) -> bool:
    """The writer is idle: the head names the last sealed line of the live file."""
    try:
        head = head_file.read_text(encoding="ascii").split()
        data = audit_file.read_bytes()
    except OSError:
        return False
    if not data.endswith(b"\n") or len(head) != 3:
        return False
    parsed = parse_sealed(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    return parsed is not None and parsed[1] == int(head[0])


def _chained(gw: GatewayProcess) -> bool:
    return Path(gw.info["audit_file"]).exists() and (gw.state_dir / "audit.key").exists()


def _config(gw: GatewayProcess) -> Path:
    return gw.stderr_path.parent / "gateway.toml"  # where run_gateway wrote it


def _copy(state: Path, audit_file: Path, into: Path) -> tuple[Path, Path]:
    for path in audit_file.parent.glob(audit_file.name + "*"):
        if path.name == audit_file.name or path.name[len(audit_file.name) + 1 :].isdigit():
            shutil.copy2(path, into / path.name)
    shutil.copy2(state / "audit.head", into / "audit.head")
    return into / audit_file.name, into / "audit.head"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _offset(lines: list[bytes], index: int) -> int:
    return sum(len(line) for line in lines[:index])


def _tamper(copy: Path, kind: str) -> tuple[int, int]:
    """Tamper with the copy's live file; (the sequence number, the byte offset) the verifier must name."""
    lines = _lines(copy)
    # a tool call record near the middle, not the last two (what a rotation header or a note is not)
    middle = next(
        (i for i in range(len(lines) // 2, len(lines) - 2) if b'"request_id": "' in lines[i]), len(lines) // 2
    )
    seq_of = [parsed[1] if (parsed := parse_sealed(line.rstrip(b"\n"))) else -1 for line in lines]
    if kind == "edited":
        line = lines[middle]
        at = line.index(b'"request_id": "') + len(b'"request_id": "')
        lines[middle] = line[:at] + (b"X" if line[at : at + 1] != b"X" else b"Y") + line[at + 1 :]
        expected = (seq_of[middle], _offset(lines, middle))
    elif kind == "deleted":
        expected = (seq_of[middle + 1], _offset(lines, middle))
        del lines[middle]
    elif kind == "reordered":
        lines[middle], lines[middle + 1] = lines[middle + 1], lines[middle]
        expected = (seq_of[middle + 1], _offset(lines, middle))
    else:  # truncated_tail: the last two records cut (the head names them)
        expected = (seq_of[-2], -1)
        lines = lines[:-2]
    copy.write_bytes(b"".join(lines))
    return expected


@phase("audit", "audit verify passes on the run's audit logs and names the record in tampered copies")
async def audit(ctx: PhaseContext) -> None:
    env = ctx.env
    # A few calls of its own, so the main log has records to tamper with also when this phase runs
    # alone (``--only audit``); then wait for the writer to be idle.
    for _ in range(6):
        await env.main.call("gateway_health", {})
    main_file = Path(env.gw.info["audit_file"])
    main_state = env.gw.state_dir
    main_head = main_state / "audit.head"

    async def caught_up() -> bool:
        return await anyio.to_thread.run_sync(_caught_up, main_file, main_head)

    ctx.figures["writer_catch_up_s"] = round(await wait_until(caught_up, 30, interval_s=0.05), 3)

    # Every gateway's log (one per state directory: restarted incarnations share theirs), as an operator
    # runs it: the gateway's own configuration, its key and head.
    latest: dict[Path, GatewayProcess] = {}
    for gw in env.gateways:
        latest[gw.state_dir] = gw
    verified: dict[str, Any] = {}
    for state, gw in latest.items():
        if not await anyio.to_thread.run_sync(_chained, gw):
            continue
        if gw.exit_code not in (None, 0):
            verified[str(state)] = f"skipped: the gateway exited {gw.exit_code} (a torn tail is expected)"
            continue
        if gw.proc.poll() is None and gw is not env.gw:
            head = state / "audit.head"
            audit_file = Path(gw.info["audit_file"])

            async def idle(audit_file: Path = audit_file, head: Path = head) -> bool:
                return await anyio.to_thread.run_sync(_caught_up, audit_file, head)

            await wait_until(idle, 30, interval_s=0.05)
        if gw is env.gw:
            code, report, elapsed = await anyio.to_thread.run_sync(_verify, ["--config", str(_config(gw))])
        else:
            code, report, elapsed = await anyio.to_thread.run_sync(_verify_here, _config(gw), {})
        ctx.check(code == 0, f"audit verify of {state} exited {code}: {json.dumps(report)[:3000]}")
        verified[str(state)] = {
            "records": report.get("records"),
            "files": len(report.get("files", [])),
            "epochs": len(report.get("epochs", [])),
            "seconds": round(elapsed, 3),
            "via": "command line" if gw is env.gw else "verify_files",
        }
    ctx.check(str(main_state) in verified, f"the main gateway's log was not verified: {sorted(verified)}")

    # Tampered copies of the main log: each kind detected, at the record it was done to.
    key = main_state / "audit.key"
    work = Path(tempfile.mkdtemp(prefix="rogacc-audit-"))
    ctx.stack.callback(shutil.rmtree, work, True)
    ctx.created(f"{work} removed", lambda: not work.exists())
    detected: dict[str, Any] = {}
    for kind in ("clean", "edited", "deleted", "reordered", "truncated_tail"):
        into = work / kind
        into.mkdir()
        copy, head = await anyio.to_thread.run_sync(_copy, main_state, main_file, into)
        copied = await anyio.to_thread.run_sync(_lines, copy)
        ctx.check(len(copied) >= 4, f"the main log has too few records to tamper with: {copy}")
        expected = None if kind == "clean" else await anyio.to_thread.run_sync(_tamper, copy, kind)
        args = {"from": copy, "key": key, "head": head}
        if kind == "edited":  # through the command line: exit status 1 and the report an operator sees
            argv = [f"--{name}={path}" for name, path in args.items()]
            code, report, _ = await anyio.to_thread.run_sync(_verify, argv)
        else:
            code, report, _ = await anyio.to_thread.run_sync(_verify_here, None, args)
        problem = report.get("problem")
        if expected is None:
            ctx.check(
                code == 0 and problem is None, f"a clean copy did not verify: {json.dumps(report)[:3000]}"
            )
            detected[kind] = "intact"
            continue
        seq, offset = expected
        ctx.check(code == 1, f"{kind}: audit verify exited {code}, want 1: {json.dumps(report)[:3000]}")
        ctx.check(
            isinstance(problem, dict) and problem.get("kind") == kind and problem.get("seq") == seq,
            f"{kind}: reported {problem}, want kind {kind} at seq {seq}",
        )
        if offset >= 0 and isinstance(problem, dict):
            ctx.check(
                problem.get("offset") == offset, f"{kind}: offset {problem.get('offset')}, want {offset}"
            )
        detected[kind] = {"seq": seq, "offset": problem.get("offset") if isinstance(problem, dict) else None}
    lines = await anyio.to_thread.run_sync(_lines, main_file)
    ctx.figures.update(
        {
            "logs_verified": verified,
            "main_log_lines": len(lines),
            "main_log_bytes": sum(len(line) for line in lines),
            "tampered_copies": detected,
        }
    )
