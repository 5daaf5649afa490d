r"""The POSIX sh programs that drive interactive sessions on the target's tmux. Each travels on stdin
(``sh -s -- ARGS``); its arguments are plain data (paths, tmux ids, bounds, key names), never the text sent
to a session: that is bound into the program itself (base64, a shell assignment) and reaches tmux through
``load-buffer -`` from a pipe fed by the ``printf`` builtin, so it appears in no argv.

Layout under the configured root (0700)::

    tmux.sock              the gateway-owned tmux server (``-f /dev/null``: no user configuration)
    <name>.<token>/        one directory per incarnation of a session (0700)
        out                the pane's output stream (``pipe-pane``), raw bytes, append only, bounded by
                           ``ulimit -f`` on its writer
        wrap               started by tmux in the pane: attaches the pipe, then execs the login shell
        pipecmd, cwd, piped

The pane's program attaches the output pipe itself before the shell starts, so the stream holds everything
the shell ever printed. The session's identity is its tmux ``session_id`` with ``session_created``; every
program checks it before acting, so a recycled id of a newer server is never mistaken for the recorded one.
"""

from __future__ import annotations

import base64
import shlex

__all__ = [
    "CLOSE_SCRIPT",
    "ENSURE_SCRIPT",
    "LOOK_SCRIPT",
    "READ_SCRIPT",
    "WAIT_SCRIPT",
    "send_script",
]

# $1 is the root. A tmux server whose last session just ended is still closing: a client that reaches it
# in that moment reads "server exited unexpectedly"; tmx retries that (bounded). `absent` says whether the
# last failure proves that no server (so no session) exists.
_PRELUDE = r"""set -u
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
"""

# $2 name $3 width $4 height $5 history $6 stream blocks (512 bytes) $7 token $8 cwd flag $9 cwd
_ENSURE = r"""name=$2 w=$3 h=$4 hist=$5 blocks=$6 token=$7 hascwd=$8 cwd=$9
command -v base64 >/dev/null 2>&1 || fail missing base64
mkdir -p -- "$root" 2>/dev/null || fail root "cannot create $root"
chmod 700 -- "$root" 2>/dev/null
# lookup: the live session named $name on our socket, if any (absence must be proven, never assumed)
lookup() {
  found=
  [ -S "$sock" ] || return 0
  if ! sl=$(tmx list-sessions -F '#{session_name} #{session_id} #{session_created} #{@rog_dir}' </dev/null)
  then
    absent && return 0
    fail tmux "$(head -c 300 "$errf")"
  fi
  while read -r n i c dd; do
    if [ "$n" = "$name" ]; then found="$i $c $dd"; return 0; fi
  done <<EOF
$sl
EOF
}
report() {
  fd=${found#* * }
  set -- $found
  sz=0
  if [ -n "$fd" ]; then size "$fd/out"; sz=$z; fi
  printf 'ROGFOUND %s %s %s\n' "$1" "$2" "$sz"
  printf 'ROGDIR %s\n' "$fd"
  exit 0
}
lookup
[ -n "$found" ] && report
# proven absent: earlier incarnations of this name are dead; remove their directories
for old in "$root/$name".*; do
  [ -d "$old" ] && rm -rf -- "$old"
done
d=$root/$name.$token
mkdir -- "$d" 2>/dev/null || fail root "cannot create $d"
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
: > "$d/out"
printf 'ulimit -f %s && exec cat >> %s\n' "$blocks" "$(q "$d/out")" > "$d/pipecmd"
if [ "$hascwd" = 1 ]; then printf '%s\n' "$cwd" > "$d/cwd"; fi
cat > "$d/wrap" <<'WRAP'
d=$(pwd)
IFS= read -r pc < pipecmd
tmux -S "${d%/*}/tmux.sock" pipe-pane -t "$TMUX_PANE" "$pc" </dev/null >/dev/null 2>&1 && : > piped
c=$HOME
if [ -s cwd ]; then IFS= read -r c < cwd; fi
cd -- "$c" 2>/dev/null || cd
exec "${SHELL:-/bin/sh}" -l
WRAP
# window-size manual (the fixed size, whoever attaches) is set on the new window only: as a global option
# tmux 3.3a crashes in the next new-session
if ! new=$(tmx start-server \; set-option -g history-limit "$hist" \; set-option -g status off \; \
    new-session -d -P -F '#{session_id} #{session_created}' -s "$name" -x "$w" -y "$h" -c "$d" \
    'exec sh ./wrap' \; set-option -w window-size manual </dev/null); then
  why=$(head -c 300 "$errf")
  lookup  # a racing creator (or a creation whose answer was lost): take the live session as it is
  [ -n "$found" ] && { rm -rf -- "$d"; report; }
  rm -rf -- "$d"
  fail tmux "$why"
fi
set -- $new
sid=$1 created=$2
tmx set-option -t "$sid" @rog_dir "$d" </dev/null >/dev/null
# the pane attaches its output pipe before starting the shell (bounded)
i=0
while [ ! -e "$d/piped" ]; do
  i=$((i + 1))
  if [ "$i" -gt 250 ]; then
    tmx kill-session -t "$sid" </dev/null >/dev/null 2>&1
    rm -rf -- "$d"
    fail pipe "the session's output pipe did not start"
  fi
  sleep 0.02
done
size "$d/out"
printf 'ROGNEW %s %s %s\n' "$sid" "$created" "$z"
printf 'ROGDIR %s\n' "$d"
"""

# $2 sid $3 created $4 dir
_LOOK = r"""sid=$2 created=$3 d=$4
size "$d/out"
if alive "$sid" "$created" "$d"; then
  printf 'ROGLOOK alive %s %s\n' "$z" "$pipe"
else
  printf 'ROGLOOK gone %s 0\n' "$z"
fi
"""

# $2 sid $3 created $4 dir $5 mode (literal|paste|none) $6.. keys; the text is bound in $b64 above
_SEND = r"""sid=$2 created=$3 d=$4 mode=$5
shift 5
alive "$sid" "$created" "$d" || { printf 'ROGSEND gone\n'; exit 0; }
size "$d/out"
before=$z
if [ "$mode" != none ]; then
  command -v base64 >/dev/null 2>&1 || fail missing base64
  buf=rog-$$-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  # the session is alive, so the server is not closing: no retry needed (stdin cannot be replayed)
  printf '%s' "$b64" | base64 -d | tmux -f /dev/null -S "$sock" load-buffer -b "$buf" - 2>"$errf" \
    || fail tmux "load-buffer: $(head -c 300 "$errf")"
  if [ "$mode" = paste ]; then flag=-p; else flag=-r; fi
  if ! tmx paste-buffer -d $flag -b "$buf" -t "$sid" </dev/null; then
    tmx delete-buffer -b "$buf" </dev/null >/dev/null 2>&1
    fail tmux "paste-buffer: $(head -c 300 "$errf")"
  fi
fi
if [ "$#" -gt 0 ]; then
  tmx send-keys -t "$sid" "$@" </dev/null || fail tmux "send-keys: $(head -c 300 "$errf")"
fi
printf 'ROGSEND ok %s\n' "$before"
"""

# $2 sid $3 created $4 dir $5 view $6 since $7 max $8 lines $9 ansi (1 keep)
_READ = r"""sid=$2 created=$3 d=$4 view=$5 since=$6 max=$7 lines=$8 keep=$9
st=gone
alive "$sid" "$created" "$d" && st=alive
if [ "$view" = stream ]; then
  [ -f "$d/out" ] || { printf 'ROGREAD nostream\n'; exit 0; }
  size "$d/out"
  if [ "$since" -gt "$z" ]; then printf 'ROGREAD cursor %s\n' "$z"; exit 0; fi
  printf 'ROGREAD ok %s %s %s %s\n' "$st" "$z" "$since" "${pipe:-0}"
  tail -c +$((since + 1)) "$d/out" | head -c "$max" | base64
  exit 0
fi
[ "$st" = alive ] || { printf 'ROGREAD gone\n'; exit 0; }
e=
[ "$keep" = 1 ] && e=-e
geo=$(tmx display-message -p -t "$sid" '#{cursor_x} #{cursor_y} #{pane_width} #{pane_height}' </dev/null) \
  || fail tmux "$(head -c 300 "$errf")"
if [ "$view" = screen ]; then
  cap=$(tmx capture-pane -p $e -t "$sid" </dev/null | tail -c "$((max + 1))" | base64) \
    || fail tmux "$(head -c 300 "$errf")"
else
  cap=$(tmx capture-pane -p $e -S "-$lines" -t "$sid" </dev/null | tail -c "$((max + 1))" | base64) \
    || fail tmux "$(head -c 300 "$errf")"
fi
printf 'ROGREAD pane %s %s\n' "$st" "$geo"
printf '%s\n' "$cap"
"""

# $2 sid $3 created $4 dir $5 bound (centiseconds) $6 since (- = the size now) $7 regex (POSIX ERE)
_WAIT = r"""sid=$2 created=$3 d=$4 bound=$5 since=$6 re=$7
now() { read -r u _ < /proc/uptime; u=${u%.*}${u#*.}; }
now
end=$((u + bound))
E=$(printf '\033')
B=$(printf '\007')
# escape sequences removed the way the gateway removes them from reads (CSI, OSC, charset, 2-char)
strip() {
  LC_ALL=C sed -e "s/$E\[[0-?]*[ -/]*[@-~]//g" -e "s/$E][^$B$E]*$B//g" -e "s/$E][^$E]*$E\\\\//g" \
    -e "s/$E[()*+][0-9A-Za-z]//g" -e "s/$E[=>78]//g" -e "s/$E[@-_]//g" | LC_ALL=C tr -d '\r\007'
}
size "$d/out"
[ "$since" = - ] && since=$z
checked=$since
out() {
  size "$d/out"
  printf 'ROGWAIT %s %s %s\n' "$1" "${cur:-$checked}" "$z"
  if [ "$1" = matched ]; then
    printf 'ROGMATCH '; printf '%s' "$m" | head -c 2048 | base64 | tr -d '\n'; echo
    printf 'ROGLINE '; printf '%s' "$line" | head -c 4096 | base64 | tr -d '\n'; echo
  fi
  exit 0
}
# search [checked, z): the first matching line (the unfinished last one included); otherwise move
# `checked` to the start of the unfinished last line, so later passes read only what is new
search() {
  size "$d/out"
  [ "$z" -gt "$checked" ] || return 1
  n=$((z - checked))
  hit=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | strip | LC_ALL=C grep -n -a -E -m 1 -- "$re") \
    && {
      ln=${hit%%:*}
      line=${hit#*:}
      used=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | head -n "$ln" | wc -c)
      cur=$((checked + ${used##* }))
      m=$(printf '%s\n' "$line" | LC_ALL=C grep -a -E -o -m 1 -- "$re" | head -n 1)
      return 0
    }
  nl=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | wc -l)
  nl=${nl##* }
  if [ "$nl" -gt 0 ]; then
    adv=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | head -n "$nl" | wc -c)
    checked=$((checked + ${adv##* }))
  fi
  return 1
}
while :; do
  if alive "$sid" "$created" "$d"; then up=1; else up=0; fi
  search && out matched
  [ "$up" = 1 ] || out session_exited
  now
  [ "$u" -ge "$end" ] && out timeout
  sleep 0.2
done
"""

# $2 sid $3 created $4 dir
_CLOSE = r"""sid=$2 created=$3 d=$4
outcome=already_exited
if alive "$sid" "$created" "$d"; then
  tmx kill-session -t "$sid" </dev/null >/dev/null || fail tmux "$(head -c 300 "$errf")"
  outcome=killed
  i=0
  while alive "$sid" "$created" "$d"; do
    i=$((i + 1))
    [ "$i" -gt 250 ] && fail kill "the session is still alive after kill-session"
    sleep 0.02
  done
fi
removed=no
case $d in
  "$root"/?*.?*) rm -rf -- "$d" && removed=yes ;;
esac
printf 'ROGCLOSE %s %s\n' "$outcome" "$removed"
"""

ENSURE_SCRIPT = _PRELUDE + _ENSURE
LOOK_SCRIPT = _PRELUDE + _LOOK
READ_SCRIPT = _PRELUDE + _READ
WAIT_SCRIPT = _PRELUDE + _WAIT
CLOSE_SCRIPT = _PRELUDE + _CLOSE


def send_script(text: bytes) -> str:
    """The send program with ``text`` bound as a base64 shell assignment (it travels on stdin only)."""
    return f"b64={shlex.quote(base64.b64encode(text).decode())}\n" + _PRELUDE + _SEND
