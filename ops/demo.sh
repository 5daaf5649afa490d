#!/usr/bin/env bash
# The README's run command: a virtualenv with the gateway, then `remoteops-gateway demo`:
# an embedded SSH target "demo" on loopback driven through the system's OpenSSH client, and the
# gateway serving MCP over HTTP (URL and token printed). Arguments go to `demo` (e.g. --stdio).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ssh >/dev/null 2>&1 || { echo "ops/demo.sh: the OpenSSH client (ssh) is required" >&2; exit 2; }
. ops/_venv.sh
ensure_venv "." >&2
exec .venv/bin/remoteops-gateway demo "$@"
