#!/usr/bin/env bash
# The README's test command: installs what the suite needs, then lints, type-checks and runs every test.
#   - Debian packages (when root and apt-get exist): openssh-server rsync sudo tmux procps iproute2,
#     zsh (a login shell of the sshd fixture's banner users),
#     chromium (the real browser the password entry page is tested with), podman and runc (docker_host_root;
#     runc where crun cannot run here; the test skips with the engine's own errors where no container can run),
#     and the shell linter shellcheck (for the remote sh programs, remoteops/*/sh/*.sh)
#   - a virtualenv in .venv with the project and its dev extra (pip cache kept in .cache/pip)
# Extra arguments go to pytest (e.g. ops/test.sh -k relay -x). pytest runs on parallel workers (pytest-xdist):
# the suite mostly waits on processes (ssh, servers, time limits), so more workers than cores pay off;
# ROG_TEST_WORKERS overrides the count (1 runs serially, without xdist). Load-sensitive timing tests share one
# worker (--dist loadgroup, xdist_group "timing", set in tests/conftest.py).
# The fast tier (no root, no sshd, no upstream/gateway/browser process): .venv/bin/pytest -m "not system"
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs="openssh-server openssh-client rsync sudo tmux procps iproute2 zsh chromium podman runc shellcheck netcat-openbsd"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    echo "ops/test.sh: installing Debian packages:$missing" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
else
  echo "ops/test.sh: not root or no apt-get: tests needing sshd/sudo will skip with that reason" >&2
fi

. ops/_venv.sh
ensure_venv ".[dev]"

echo "ops/test.sh: ruff check" >&2
.venv/bin/ruff check .
echo "ops/test.sh: ruff format --check" >&2
.venv/bin/ruff format --check .
echo "ops/test.sh: mypy --strict gateway upstream remoteops" >&2
.venv/bin/mypy --strict gateway upstream remoteops
echo "ops/test.sh: shellcheck remoteops/*/sh/*.sh" >&2
for f in remoteops/*/sh/*.sh; do
  # -x follows each program's `. ./fragment.sh` include (sources are relative to the program's directory)
  (cd "$(dirname "$f")" && shellcheck -s sh -x "$(basename "$f")")
done
./ops/checks.sh  # the docs site (mkdocs --strict), the license inventory, pip-audit of ops/constraints.txt
workers="${ROG_TEST_WORKERS:-4}"
if [ "$workers" = 1 ]; then
  echo "ops/test.sh: pytest (serial)" >&2
  exec .venv/bin/pytest -p no:xdist "$@"
fi
echo "ops/test.sh: pytest on $workers workers" >&2
exec .venv/bin/pytest -n "$workers" --dist loadgroup "$@"
