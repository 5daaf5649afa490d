# Sourced by ops/test.sh and ops/demo.sh: make .venv with the project installed (idempotent, cached).
# usage: ensure_venv "<pip extra spec>"   e.g. ensure_venv "." or ensure_venv ".[dev]"
ensure_venv() {
  local spec=$1 py=${PYTHON:-python3}
  "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || { echo "remoteops-gateway needs Python >= 3.11 ($py is $("$py" -V 2>&1))" >&2; return 2; }
  export PIP_CACHE_DIR="$PWD/.cache/pip" PIP_DISABLE_PIP_VERSION_CHECK=1
  # the stamp changes with the dependencies and their pinned versions (ops/constraints.txt)
  local stamp=".venv/.installed-$(printf '%s' "$spec" | tr -c 'a-z' '_')-$(cat pyproject.toml ops/constraints.txt | sha256sum | cut -c1-16)"
  if [ ! -x .venv/bin/python ]; then
    if ! "$py" -m venv .venv >/dev/null 2>&1; then
      rm -rf .venv
      # Debian/Ubuntu ship venv separately (python3-venv); install it when we can, else say what is missing.
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        "$py" -m venv .venv
      else
        echo "cannot create a virtualenv with $py: install python3-venv (apt-get install python3-venv)" >&2
        return 2
      fi
    fi
  fi
  if [ ! -f "$stamp" ]; then
    echo "installing $spec into .venv (once)..." >&2
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -c ops/constraints.txt -e "$spec"
    touch "$stamp"
  fi
}
