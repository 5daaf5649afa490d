"""The ``remoteops-gateway`` command line.

remoteops-gateway serve --stdio | --http [--config PATH] [--host H] [--port N] [--ready-file F]
remoteops-gateway demo [--stdio] [--port N]
remoteops-gateway config check [--config PATH]
remoteops-gateway tools [--markdown]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from gateway._catalog import AnySpec, build_catalog
from gateway._demo import demo_settings
from gateway._errors import ConfigError
from gateway._http import ensure_token
from gateway._logging import configure_logging
from gateway._redact import Redactor
from gateway._serve import serve_http, serve_stdio
from gateway.config import Settings, load_settings
from gateway.tools import all_specs

__all__ = ["main"]

_SECRET_FIELD_HINTS = ("token", "password", "secret", "header", "authorization", "env")


def _mask(value: Any, key: str = "") -> Any:
    """Mask secret-bearing values (tokens, passwords, headers, env values); file paths stay visible."""
    lowered = key.lower()
    if value and any(h in lowered for h in _SECRET_FIELD_HINTS) and not lowered.endswith(("_file", "_path")):
        return "***"
    if isinstance(value, dict):
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remoteops-gateway", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    parser.add_argument("--config", type=Path, help="TOML configuration file (or $REMOTEOPS_GATEWAY_CONFIG)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve MCP over stdio or streamable HTTP")
    mode = serve.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true")
    mode.add_argument("--http", action="store_true")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--ready-file", type=Path, help="write {url, port, token_file} as JSON once serving")

    demo = sub.add_parser("demo", help="start an embedded SSH target 'demo' and serve the gateway against it")
    demo.add_argument("--stdio", action="store_true", help="serve over stdio instead of HTTP")
    demo.add_argument("--port", type=int, default=None)
    demo.add_argument("--ready-file", type=Path)
    demo.add_argument("--workdir", type=Path, help="where keys, ssh_config and the sandbox live")

    config = sub.add_parser("config", help="configuration commands")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    config_sub.add_parser("check", help="validate and print the effective configuration, secrets masked")

    tools = sub.add_parser("tools", help="print the own-tool catalog")
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
            with contextlib.suppress(OSError):  # read again on every connect; may appear later
                secrets.append(conn.bearer_token_file.read_text(encoding="utf-8").strip())
    return secrets


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
) -> None:
    """Serve; ``prepare`` may start something first (the demo target) and adjust the settings."""
    redactor = Redactor()
    token: str | None = None
    if not stdio and settings.auth.mode == "bearer":
        token = ensure_token(settings.token_path)
        redactor.add_secret(token)
    for secret in upstream_secrets(settings):
        redactor.add_secret(secret)
    configure_logging(settings.log_level, redactor)
    specs = all_specs()

    async def run() -> None:
        async with prepare(settings) as effective:
            if stdio:
                await serve_stdio(effective, specs, redactor)
            else:
                await serve_http(
                    effective, specs, redactor, token=token, ready_file=ready_file, show_token=show_token
                )

    anyio.run(run)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
        if args.command == "config":
            build_catalog(
                all_specs(), **settings.tools.model_dump()
            )  # toolset and tool names are validated too
            print(json.dumps(_mask(settings.model_dump(mode="json")), indent=2))
            return 0
        if args.command == "tools":
            specs = all_specs()
            if args.markdown:
                print(catalog_markdown(specs))
            else:
                for s in specs:
                    print(f"{s.name:28} {s.toolset.value:9} {s.title}")
            return 0
        if args.command == "serve":
            settings = _with_overrides(settings, args.host, args.port)
            _serve(settings, stdio=args.stdio, ready_file=args.ready_file)
            return 0
        if args.command == "demo":
            settings = _with_overrides(settings, None, args.port)

            def prepare(s: Settings) -> AbstractAsyncContextManager[Settings]:
                return demo_settings(s, args.workdir)

            _serve(
                settings,
                stdio=args.stdio,
                ready_file=args.ready_file,
                show_token=not args.stdio,
                prepare=prepare,
            )
            return 0
    except ConfigError as exc:
        print(f"remoteops-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
