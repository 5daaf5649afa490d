# shellcheck disable=SC2034  # a fragment: pipe is read by the programs that include it (look.sh)
set -u
umask 077
root=$1
case $root in /*) ;; *) root=$HOME/$root ;; esac
sock=$root/tmux.sock
# tmux's error text goes to a file in the private root (never a guessable name in a shared /tmp); every
# program writes it only after the root exists (ensure makes it first; the others need its socket)
errf=$root/.tmux-err.$$
trap 'rm -f "$errf"' EXIT
fail() { printf 'ROGERR %s %s\n' "$1" "$2"; exit 3; }
command -v tmux >/dev/null 2>&1 || fail missing tmux
tmx() {
  n=0
  while :; do
    if tmux -f /dev/null -S "$sock" "$@" 2>"$errf"; then return 0; fi
    if grep -q 'server exited unexpectedly' "$errf" 2>/dev/null && [ "$n" -lt 5 ]; then
      n=$((n + 1))
      sleep 0.1
      continue
    fi
    return 1
  done
}
absent() {
  [ ! -S "$sock" ] && return 0
  grep -q -e 'no server running' -e 'No such file or directory' -e 'Connection refused' "$errf" 2>/dev/null
}
# alive SID CREATED DIR: 0 alive, 1 gone; an unexplained tmux failure ends the program (never guessed).
# The directory (a fresh random name per incarnation) makes the identity unique even when a new server
# reuses a session id within the same second.
alive() {
  [ -S "$sock" ] || return 1
  if ! sl=$(tmx list-sessions -F '#{session_id} #{session_created} #{pane_pipe} #{@rog_dir}' </dev/null); then
    absent && return 1
    fail tmux "$(head -c 300 "$errf")"
  fi
  pipe=0
  while read -r i c p dd; do
    if [ "$i" = "$1" ] && [ "$c" = "$2" ] && [ "$dd" = "$3" ]; then pipe=$p; return 0; fi
  done <<EOF
$sl
EOF
  return 1
}
size() { z=$(wc -c 2>/dev/null < "$1") || z=0; z=${z##* }; }
