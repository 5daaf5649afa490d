"""The ``remoteops-gateway`` command line.

remoteops-gateway [--config PATH] serve --stdio | --http [--host H] [--port N] [--ready-file F]
remoteops-gateway [--config PATH] demo [--stdio] [--port N] [--ready-file F] [--workdir DIR]
remoteops-gateway [--config PATH] config check
remoteops-gateway tools [--markdown]

``--config`` is accepted before or after the subcommand. Startup problems (bad configuration, unusable
state files, a port in use) are one line on stderr and exit status 2, never a traceback. The acceptance
suite of a source checkout is ``python -m acceptance``, not a subcommand: the product does not import its
harness.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from gateway._catalog import AnySpec, build_catalog
from gateway._demo import demo_settings
from gateway._early import EarlyUpstreams
from gateway._errors import ConfigError, GatewayError
from gateway._logging import configure_logging
from gateway._redact import Redactor
from gateway._statelock import DirectoryBusy, DirectoryLock
from gateway._version import __version__
from gateway.config import Settings, load_settings
from gateway.serving.http import ensure_token
from gateway.serving.serve import serve_http, serve_stdio
from gateway.tools import all_specs

__all__ = ["main"]

_EXAMPLES = """\
examples:
  remoteops-gateway demo                                  try it: embedded target "demo", HTTP
  remoteops-gateway serve --stdio --config gateway.toml   for clients that spawn the server
  remoteops-gateway serve --http --config gateway.toml    streamable HTTP with a bearer token
  remoteops-gateway config check --config gateway.toml    validate; print the effective settings
  remoteops-gateway tools --markdown                      the own-tool catalog

--config may also come from $REMOTEOPS_GATEWAY_CONFIG, else ~/.config/remoteops-gateway/gateway.toml is
read when it exists ($XDG_CONFIG_HOME); any key can be overridden with
REMOTEOPS_GATEWAY__SECTION__KEY=value (e.g. REMOTEOPS_GATEWAY__SERVER__PORT=9000).
"""

_CONFIG_HELP = (
    "TOML configuration file (default: $REMOTEOPS_GATEWAY_CONFIG, else "
    "~/.config/remoteops-gateway/gateway.toml if it exists, else built-in defaults)"
)


def _add_config(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    # After the subcommand too; SUPPRESS keeps a subcommand's missing --config from erasing the top one.
    parser.add_argument(
        "--config", type=Path, metavar="PATH", help=_CONFIG_HELP, default=None if top else argparse.SUPPRESS
    )


def _parser() -> argparse.ArgumentParser:
    def sub_parser(name: str, help_text: str, epilog: str | None = None) -> argparse.ArgumentParser:
        made = sub.add_parser(
            name,
            help=help_text,
            description=help_text[0].upper() + help_text[1:] + ".",
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_config(made)
        return made

    parser = argparse.ArgumentParser(
        prog="remoteops-gateway",
        description="An MCP gateway: relays an upstream terminal MCP server and adds structured\n"
        "remote-operations tools over an OpenSSH ControlMaster pool.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"remoteops-gateway {__version__}")
    _add_config(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub_parser(
        "serve",
        "serve MCP over stdio or streamable HTTP",
        "examples:\n  remoteops-gateway serve --stdio --config gateway.toml\n"
        "  remoteops-gateway serve --http --config gateway.toml --port 9000",
    )
    mode = serve.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--stdio",
        action="store_true",
        help="one MCP connection on stdin/stdout (no auth: whoever spawns the process owns it)",
    )
    mode.add_argument(
        "--http", action="store_true", help="streamable HTTP at server.host:server.port/server.path"
    )
    serve.add_argument("--host", help="bind address for --http (overrides server.host)")
    serve.add_argument(
        "--port", type=int, help="TCP port for --http, 0 = any free port (overrides server.port)"
    )
    serve.add_argument(
        "--ready-file",
        type=Path,
        metavar="FILE",
        help="once serving, write {url, port, pid, token_file, ...} to FILE as JSON (for supervisors, tests)",
    )

    demo = sub_parser(
        "demo",
        "start an embedded SSH target 'demo' and serve the gateway against it",
        "examples:\n  remoteops-gateway demo\n  remoteops-gateway demo --stdio",
    )
    demo.add_argument("--stdio", action="store_true", help="serve over stdio instead of HTTP")
    demo.add_argument("--port", type=int, default=None, help="TCP port for HTTP (default server.port)")
    demo.add_argument("--ready-file", type=Path, metavar="FILE", help="as for serve: JSON once serving")
    demo.add_argument("--workdir", type=Path, help="where keys, ssh_config and the sandbox live")

    config = sub_parser("config", "configuration commands")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    check = config_sub.add_parser(
        "check",
        help="validate and print the effective configuration, secrets masked",
        description="Validate the configuration, print it (JSON, secrets digested) on stdout, warnings "
        "and a one-line verdict on stderr. Exit status 0 when valid, 2 when not.",
    )
    _add_config(check)

    audit = sub_parser("audit", "audit trail commands")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="SUBCOMMAND")
    verify = audit_sub.add_parser(
        "verify",
        help="verify the audit chain (current and rotated files, and the head)",
        description="Walk the audit files oldest first and check every record's sequence number and MAC; "
        "print a JSON report on stdout. Exit status 0 when intact, 1 when a record was edited, inserted, "
        "deleted or reordered, the tail is cut or a rotation link is broken, 2 on a usage error "
        "(no key, no audit file).",
    )
    _add_config(verify)
    verify.add_argument(
        "--from",
        dest="from_file",
        type=Path,
        metavar="FILE",
        help="the live audit file "
        "to start from (its rotated FILE.1 … beside it); default: the configured one",
    )
    verify.add_argument(
        "--key",
        type=Path,
        metavar="FILE",
        help="the MAC key file (default audit.key_file or <state_dir>/audit.key)",
    )
    verify.add_argument(
        "--head",
        type=Path,
        metavar="FILE",
        help="the chain head to check the tail against "
        "(default <state_dir>/audit.head, unless --from is given)",
    )

    tools = sub_parser("tools", "print the own-tool catalog")
    tools.add_argument("--markdown", action="store_true", help="as the README's Markdown table")
    return parser


def upstream_secrets(settings: Settings) -> list[str]:
    """Credentials the gateway holds for its upstreams, so the redactor can scrub them from any output."""
    secrets: list[str] = []
    for entry in settings.upstreams:
        conn = entry.connection
        for value in (*conn.headers.values(), *conn.env.values()):
            secrets.append(value)
            scheme, _, credential = value.partition(" ")
            if credential and scheme.lower() in ("bearer", "basic", "token"):
                secrets.append(credential)
        if conn.bearer_token_file is not None:
            with contextlib.suppress(OSError, ValueError):  # re-read on every connect; may appear later
                secrets.append(conn.bearer_token_file.read_text(encoding="utf-8").strip())
    return secrets


def config_warnings(settings: Settings) -> list[str]:
    """What ``config check`` can see will not work although the configuration is valid."""
    warnings: list[str] = []
    for entry in settings.upstreams:
        conn = entry.connection
        if conn.transport != "stdio" or not conn.command:
            continue
        program = conn.command[0]
        search = conn.env.get("PATH", os.environ.get("PATH", os.defpath))
        if "/" in program:
            cwd = conn.cwd or Path.cwd()
            path = Path(program) if Path(program).is_absolute() else cwd / program
            found = path.is_file() and os.access(path, os.X_OK)
        else:
            found = shutil.which(program, path=search) is not None
        if not found:
            warnings.append(
                f"upstream {conn.name!r}: command {program!r} not found on PATH (or not executable); "
                "the upstream will stay unavailable until it is installed"
            )
    return warnings


def preflight(settings: Settings) -> list[ConfigError]:
    """What ``serve`` refuses to start with beyond the model's own validation; ``config check`` runs the
    same checks (and creates nothing)."""
    problems: list[ConfigError] = []
    state = settings.state_dir
    if state.exists() and not state.is_dir():
        problems.append(
            ConfigError(f"state directory {state} exists and is not a directory", key="state_dir")
        )
    for index, root in enumerate(settings.transfers.local_roots):
        if not root.expanduser().is_dir():
            problems.append(
                ConfigError(
                    f"local root {root} does not exist or is not a directory",
                    key=f"transfers.local_roots.{index}",
                )
            )
    if settings.token_path.is_dir():
        problems.append(
            ConfigError(f"token file {settings.token_path} is a directory", key="auth.token_file")
        )
    if settings.audit.key_file is not None and not settings.audit.key_file.is_file():
        problems.append(
            ConfigError(f"audit key file {settings.audit.key_file} does not exist", key="audit.key_file")
        )
    try:
        build_catalog(all_specs(), **settings.tools.model_dump(), settings=settings)
    except ConfigError as exc:
        problems.append(exc)
    return problems


_PLAIN_ENV = re.compile(
    r"(^|_)(SOCKET|DIR|PATH|FILE|HOME|LANG|TERM|TZ|SHELL|USER|LOGNAME)$|^LC_", re.IGNORECASE
)
"""Upstream environment variables whose values are settings, not credentials (``LIBTMUX_SOCKET``)."""


def _is_plain_env(name: str) -> bool:
    return bool(_PLAIN_ENV.search(name)) and not Redactor.sensitive_key(name)


def _empty(value: Any) -> bool:
    return isinstance(value, (str, list, dict)) and len(value) == 0


def _show_plain(view: Any, raw: Any) -> Any:
    """``config check``'s view: what the redactor digested but is no secret comes back as it is —
    empty values (an unset ``askpass_command``) reveal nothing."""
    if _empty(raw):
        return raw
    if isinstance(raw, dict) and isinstance(view, dict):
        return {k: _show_plain(view[k], raw[k]) if k in raw else v for k, v in view.items()}
    if isinstance(raw, list) and isinstance(view, list) and len(raw) == len(view):
        return [_show_plain(v, r) for v, r in zip(view, raw, strict=True)]
    return view


def config_view(settings: Settings) -> dict[str, Any]:
    """The effective configuration as ``config check`` prints it: secrets digested, settings shown."""
    redactor = Redactor(upstream_secrets(settings))
    raw = settings.model_dump(mode="json")
    view: dict[str, Any] = _show_plain(redactor.arguments(raw), raw)
    for index, entry in enumerate(settings.upstreams):
        shown = view["upstreams"][index]["connection"]["env"]
        for name, value in entry.connection.env.items():
            if _is_plain_env(name):
                shown[name] = value
    return view


def _config_check(settings: Settings) -> int:
    problems = preflight(settings)
    if problems:
        raise ConfigError.of(problems)
    specs = all_specs()
    catalog = build_catalog(specs, **settings.tools.model_dump(), settings=settings)
    print(json.dumps(config_view(settings), indent=2))
    warnings = config_warnings(settings)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    verdict = (
        f"{len(settings.targets)} target(s), {len(settings.upstreams)} upstream(s), "
        f"{len(catalog.enabled)} own tool(s) enabled"
    )
    if warnings:
        verdict += f"; {len(warnings)} warning(s) above"
    print(f"remoteops-gateway: configuration OK: {verdict}", file=sys.stderr)
    return 0


def _audit_verify(settings: Settings, from_file: Path | None, key: Path | None, head: Path | None) -> int:
    from gateway.audit.chain import load_key
    from gateway.audit.verify import verify_files

    path = from_file or settings.audit_path
    if not path.exists() and not path.with_name(f"{path.name}.1").exists():
        print(f"remoteops-gateway: no audit file at {path}", file=sys.stderr)
        return 2
    try:
        mac_key = load_key(key or settings.audit_key_path, create=False)
    except ConfigError as exc:
        print(f"remoteops-gateway: {exc}", file=sys.stderr)
        return 2
    if head is None and from_file is None:
        head = settings.state_dir / "audit.head"
    report = verify_files(
        path, mac_key, head_file=head, backups=None if from_file else settings.audit.backups
    )
    print(json.dumps(report.as_dict(), indent=2))
    if report.problem is None:
        print(
            f"remoteops-gateway: audit intact: {report.records} record(s) in {len(report.files)} file(s)",
            file=sys.stderr,
        )
        return 0
    p = report.problem
    print(
        f"remoteops-gateway: audit {p.kind} at {p.file} offset {p.offset} seq {p.seq}: {p.detail}",
        file=sys.stderr,
    )
    return 1


def _prepare_state_dir(settings: Settings) -> None:
    """The state directory exists (0700) and is a directory, or a ConfigError names the path."""
    state = settings.state_dir
    if state.exists() and not state.is_dir():
        raise ConfigError(f"state directory {state} exists and is not a directory", key="state_dir")
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(
            f"cannot create state directory {state}: {exc.strerror or exc}", key="state_dir"
        ) from None


_STATE_HINT = (
    'give this gateway a state directory of its own: state_dir = "DIR" in the configuration, '
    "or REMOTEOPS_GATEWAY__STATE_DIR=DIR"
)
_DEMO_SLOTS = 16


class _Locks(DirectoryLock):
    """The state directory's lock plus the audit file's, released together."""

    def __init__(self, state: DirectoryLock, audit: DirectoryLock) -> None:
        super().__init__(state.directory, what="state directory", hint=_STATE_HINT)
        self._held = (state, audit)

    def release(self) -> None:
        for lock in reversed(self._held):
            lock.release()


def _state_lock(settings: Settings) -> DirectoryLock:
    """The state directory, prepared and locked for this process (or StartupError naming the owner)."""
    _prepare_state_dir(settings)
    lock = DirectoryLock(settings.state_dir, what="state directory", hint=_STATE_HINT)
    lock.acquire()
    audit = settings.audit_path
    if audit.parent.resolve() == settings.state_dir.resolve():
        return lock
    # an audit file elsewhere is one process's too: never two processes' records in one chain
    audit_lock = DirectoryLock(
        audit,
        what="audit file",
        hint="give this gateway its own audit.path",
        lock_file=audit.with_name(f"{audit.name}.lock"),
    )
    try:
        audit_lock.acquire()
    except BaseException:
        lock.release()
        raise
    return _Locks(lock, audit_lock)


def _demo_state(settings: Settings) -> tuple[Settings, DirectoryLock]:
    """A demo without a configured ``state_dir`` takes the first free ``<default>/demo-N``, so that
    ``demo`` and ``demo --stdio`` (or two of either) run side by side; a configured one is locked as is."""
    if "state_dir" in settings.model_fields_set:
        return settings, _state_lock(settings)
    for slot in range(1, _DEMO_SLOTS + 1):
        candidate = settings.model_copy(update={"state_dir": settings.state_dir / f"demo-{slot}"})
        try:
            return candidate, _state_lock(candidate)
        except DirectoryBusy:
            if slot == _DEMO_SLOTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _with_overrides(settings: Settings, host: str | None, port: int | None) -> Settings:
    server = settings.server.model_copy(
        update={k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    )
    return Settings.model_validate({**settings.model_dump(), "server": server.model_dump()})


def catalog_markdown(specs: Sequence[AnySpec]) -> str:
    rows = [
        "| tool | toolset | read-only | destructive | idempotent | open-world | what it does |",
        "|---|---|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}
    for s in specs:
        line = s.description.split(". ")[0].rstrip(".")
        rows.append(
            f"| `{s.name}` | {s.toolset.value} | {yes[s.read_only]} | {yes[s.destructive]} | "
            f"{yes[s.idempotent]} | {yes[s.open_world]} | {line}. |"
        )
    return "\n".join(rows)


Prepare = Callable[[Settings], AbstractAsyncContextManager[Settings]]


@asynccontextmanager
async def _as_is(settings: Settings) -> AsyncIterator[Settings]:
    yield settings


def _serve(
    settings: Settings,
    *,
    stdio: bool,
    ready_file: Path | None,
    show_token: bool = False,
    prepare: Prepare = _as_is,
    state_lock: DirectoryLock | None = None,
    early: EarlyUpstreams | None = None,
) -> None:
    """Serve; ``prepare`` may start something first (the demo target) and adjust the settings.

    The state directory is this process's alone while it serves (``state_lock``, else locked here)."""
    problems = preflight(settings)
    if problems:
        raise ConfigError.of(problems)
    lock = state_lock or _state_lock(settings)
    try:
        _serve_locked(
            settings, stdio=stdio, ready_file=ready_file, show_token=show_token, prepare=prepare, early=early
        )
    finally:
        lock.release()


def _serve_locked(
    settings: Settings,
    *,
    stdio: bool,
    ready_file: Path | None,
    show_token: bool,
    prepare: Prepare,
    early: EarlyUpstreams | None,
) -> None:
    redactor = Redactor()
    token: str | None = None
    if not stdio and settings.auth.mode == "bearer":
        token = ensure_token(settings.token_path)
        redactor.add_secret(token)
    for secret in upstream_secrets(settings):
        redactor.add_secret(secret)
    writer = configure_logging(settings.log_level, redactor)
    specs = all_specs()

    async def run() -> None:
        async with prepare(settings) as effective:
            if stdio:
                await serve_stdio(effective, specs, redactor, early=early)
            else:
                await serve_http(
                    effective, specs, redactor, token=token, ready_file=ready_file, show_token=show_token
                )

    try:
        anyio.run(run)
    except BaseExceptionGroup as group:  # a startup error raised inside a task group (the demo target)
        _raise_sole_gateway_error(group)
        raise
    finally:
        writer.stop()  # every queued line is written before the process goes on to exit


def _raise_sole_gateway_error(group: BaseExceptionGroup[BaseException]) -> None:
    """When every exception in the group is a GatewayError, raise the first one plainly."""
    matched, rest = group.split(GatewayError)
    if matched is not None and rest is None:
        leaf: BaseException = matched
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise leaf from None


def _quiet_broken_pipe() -> int:
    """The reader went away (``… | head``): stop quietly, and keep the interpreter's final flush quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141  # what a shell reports for a command ended by SIGPIPE


def main(argv: Sequence[str] | None = None, *, early: EarlyUpstreams | None = None) -> int:
    """``early``: stdio upstreams the entry point started before importing this module (``gateway._early``);
    ``serve --stdio`` hands each to its upstream when the loaded settings match it."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(args, early)
    except ConfigError as exc:
        if args.command == "config":  # config check shows every problem, one per line
            for problem in exc.problems:
                print(f"remoteops-gateway: configuration error: {problem}", file=sys.stderr)
        else:  # a start-up failure stays one line
            print(f"remoteops-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"remoteops-gateway: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace, early: EarlyUpstreams | None = None) -> int:
    if args.command == "tools":  # needs no configuration
        specs = all_specs()
        if args.markdown:
            print(catalog_markdown(specs))
        else:
            for s in specs:
                print(f"{s.name:28} {s.toolset.value:9} {s.title}")
        sys.stdout.flush()  # a closed pipe surfaces here, inside main's handler
        return 0
    settings = load_settings(args.config, search=True)
    if args.command == "config":
        code = _config_check(settings)
        sys.stdout.flush()
        return code
    if args.command == "audit":
        code = _audit_verify(settings, args.from_file, args.key, args.head)
        sys.stdout.flush()
        return code
    if args.command == "serve":
        settings = _with_overrides(settings, args.host, args.port)
        _serve(settings, stdio=args.stdio, ready_file=args.ready_file, early=early)
        return 0
    if args.command == "demo":
        settings, state_lock = _demo_state(settings)  # before the overrides: they mark every field set
        with contextlib.ExitStack() as held:
            held.callback(state_lock.release)
            if args.workdir is not None and args.workdir.resolve() != settings.state_dir.resolve():
                # the target's keys and ssh_config: one demo at a time there too
                args.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
                held.enter_context(
                    DirectoryLock(
                        args.workdir, what="demo directory", hint="give each demo its own --workdir DIR"
                    )
                )
            settings = _with_overrides(settings, None, args.port)

            def prepare(s: Settings) -> AbstractAsyncContextManager[Settings]:
                return demo_settings(s, args.workdir)

            _serve(
                settings,
                stdio=args.stdio,
                ready_file=args.ready_file,
                show_token=not args.stdio,
                prepare=prepare,
                state_lock=state_lock,
            )
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
