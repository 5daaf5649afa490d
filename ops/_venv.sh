# Sourced by ops/test.sh and ops/demo.sh: make .venv with the project installed (idempotent, cached).
# usage: ensure_venv "<pip extra spec>"   e.g. ensure_venv "." or ensure_venv ".[dev]"
ensure_venv() {
  local spec=$1 py=${PYTHON:-python3}
  "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || { echo "remoteops-gateway needs Python >= 3.11 ($py is $("$py" -V 2>&1))" >&2; return 2; }
  export PIP_CACHE_DIR="$PWD/.cache/pip" PIP_DISABLE_PIP_VERSION_CHECK=1
  local stamp=".venv/.installed-$(printf '%s' "$spec" | tr -c 'a-z' '_')-$(sha256sum pyproject.toml | cut -c1-16)"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  if [ ! -f "$stamp" ]; then
    echo "installing $spec into .venv (once)..." >&2
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e "$spec"
    touch "$stamp"
  fi
}
