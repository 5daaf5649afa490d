#!/usr/bin/env bash
# The README's test command: installs what the suite needs, then lints, type-checks and runs every test.
#   - Debian packages (when root and apt-get exist): openssh-server rsync sudo tmux procps iproute2,
#     zsh (a login shell of the sshd fixture's banner users),
#     chromium (the real browser the password entry page is tested with), podman and runc (docker_host_root;
#     runc where crun cannot run here; the test skips with the engine's own errors where no container can run),
#     and the shell linter shellcheck (for the remote sh programs, remoteops/*/sh/*.sh)
#   - a virtualenv in .venv with the project and its dev extra (pip cache kept in .cache/pip)
# Then four steps run at the same time, each a bounded background job (coreutils `timeout`, its own process
# group: on a time-out or Ctrl-C everything it started gets SIGTERM, then SIGKILL) writing its own log under
# .cache/test-logs/ (ROG_TEST_LOGS overrides); the exit status is non-zero when any step failed, and the log of
# every failed step is printed at the end:
#   - lint: ruff check, ruff format --check, mypy --strict on the three packages, mypy on tests/ and acceptance/
#     (their non-strict overrides are in pyproject.toml), shellcheck of the remote sh programs
#   - acceptance: the quick acceptance run (python -m acceptance --quick), then tests/test_acceptance_quick.py
#     checking the report that run wrote (ROG_ACCEPTANCE_QUICK_OUT); skipped when pytest arguments are given
#     (a selection such as -k relay) unless ROG_TEST_ACCEPTANCE=1, forced off with ROG_TEST_ACCEPTANCE=0
#   - any extra check steps (marked below)
#   - pytest (in the foreground, output on the terminal) on parallel workers (pytest-xdist): the suite mostly
#     waits on processes (ssh, servers, time limits), so more workers than cores pay off; ROG_TEST_WORKERS
#     overrides the count (1 runs serially, without xdist). Load-sensitive timing tests share one worker
#     (--dist loadgroup, xdist_group "timing", set in tests/conftest.py). Hypothesis runs its `ci` profile
#     (derandomized, fewer examples; HYPOTHESIS_PROFILE=thorough for the full counts, tests/conftest.py).
# Extra arguments go to pytest (e.g. ops/test.sh -k relay -x).
# The fast tier (no root, no sshd, no upstream/gateway/browser process): .venv/bin/pytest -m "not system"
# shellcheck disable=SC2317  # the step functions run through `bash -c`, stop_steps through the trap
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
# Bytecode cached inside the project even where the machine exports PYTHONDONTWRITEBYTECODE=1 (as these do):
# otherwise every gateway and upstream process the steps start compiles the project again
# (tests/fixtures/bytecode.py does the same for a bare pytest run)
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.cache/pycache}"
unset PYTHONDONTWRITEBYTECODE

logs="${ROG_TEST_LOGS:-.cache/test-logs}"
export logs  # read by the step functions, which run in their own `bash -c`
rm -rf "$logs"
mkdir -p "$logs"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"

steps=()  # "name pid" of every background step
step() {  # step NAME SECONDS COMMAND...: run COMMAND in the background, bounded, output in $logs/NAME.log
  local name=$1 seconds=$2
  shift 2
  echo "ops/test.sh: $name (log $logs/$name.log)" >&2
  timeout --kill-after=60 "$seconds" "$@" >"$logs/$name.log" 2>&1 &
  steps+=("$name $!")
}
stop_steps() {  # on Ctrl-C or SIGTERM: stop every step still running (timeout passes SIGTERM on to its group)
  for entry in "${steps[@]}"; do
    kill -TERM "${entry#* }" 2>/dev/null || true
  done
}
trap 'stop_steps; wait; exit 130' INT TERM

lint() {
  set -e
  echo "== ruff check"; .venv/bin/ruff check .
  echo "== ruff format --check"; .venv/bin/ruff format --check .
  echo "== mypy --strict gateway upstream remoteops"; .venv/bin/mypy --strict gateway upstream remoteops
  echo "== mypy tests acceptance"; .venv/bin/mypy tests acceptance
  echo "== shellcheck remoteops/*/sh/*.sh"
  for f in remoteops/*/sh/*.sh; do
    # -x follows each program's `. ./fragment.sh` include (sources are relative to the program's directory)
    (cd "$(dirname "$f")" && shellcheck -s sh -x "$(basename "$f")")
  done
}

acceptance_quick() {  # the run, then the same pytest assertions over the report it wrote
  local out="$logs/acceptance"
  mkdir -p "$out"
  local rc=0
  .venv/bin/python -m acceptance --quick --out "$out" 2>"$out/stderr.log" || rc=$?
  tail -n 60 "$out/stderr.log"
  echo "$rc" >"$out/exit-status"
  ROG_ACCEPTANCE_QUICK_OUT="$out" .venv/bin/pytest -p no:xdist -q tests/test_acceptance_quick.py
}

export -f lint acceptance_quick
step lint 900 bash -c lint

acceptance="${ROG_TEST_ACCEPTANCE:-}"
if [ -z "$acceptance" ]; then
  if [ "$#" = 0 ]; then acceptance=1; else acceptance=0; fi
fi
pytest_args=()
if [ "$acceptance" = 1 ]; then
  step acceptance 900 bash -c acceptance_quick
  pytest_args+=(--ignore=tests/test_acceptance_quick.py)  # its step runs it, over the step's report
fi

# --- extra check steps: one `step NAME SECONDS COMMAND...` line each (they run beside pytest) ---------------
step checks 900 ./ops/checks.sh  # the docs site (mkdocs --strict), the license inventory, pip-audit of ops/constraints.txt

# ---------------------------------------------------------------------------------------------------------

workers="${ROG_TEST_WORKERS:-4}"
status=0
if [ "$workers" = 1 ]; then
  echo "ops/test.sh: pytest (serial)" >&2
  .venv/bin/pytest -p no:xdist "${pytest_args[@]}" "$@" || status=$?
else
  echo "ops/test.sh: pytest on $workers workers" >&2
  .venv/bin/pytest -n "$workers" --dist loadgroup "${pytest_args[@]}" "$@" || status=$?
fi
[ "$status" = 0 ] || echo "ops/test.sh: FAILED: pytest (exit $status)" >&2

for entry in "${steps[@]}"; do
  name=${entry% *}
  rc=0
  wait "${entry#* }" || rc=$?
  if [ "$rc" = 0 ]; then
    echo "ops/test.sh: passed: $name" >&2
  else
    [ "$rc" = 124 ] && echo "ops/test.sh: $name timed out" >&2
    echo "ops/test.sh: FAILED: $name (exit $rc), its log $logs/$name.log ends:" >&2
    tail -n 80 "$logs/$name.log" "$logs/$name"/*.log 2>/dev/null >&2 || true
    status=1
  fi
done
exit "$status"
