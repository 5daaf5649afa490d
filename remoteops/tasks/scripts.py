r"""The POSIX sh programs that run a task on the target. All of them travel on stdin (``sh -s -- ARGS``);
their arguments are plain data (paths, the nonce's *hash*, bounds), never the nonce itself.

Task directory ``<root>/<task id>/`` (0700, created with ``mkdir`` so a second start of the same ID fails)::

    cmd            the command (generated here, shell-quoted with shlex): records its pid, exports the
                   per-task marker, cd, env, exec argv
    supervise.sh   the supervisor
    mode           tmux | setsid
    sup            "<pid> <starttime>" of the supervisor (its identity, from /proc/<pid>/stat)
    session        tmux "<session id> <created>" or "-"
    pgid           the task's process group (= its session: it runs under setsid)
    combined, stdout, stderr   output (combined is both streams in arrival order)
    exit.<nonce>   the exit status, written by the supervisor only

The nonce reaches the supervisor through a FIFO (``nonce.fifo``, opened read-write by the starter) and lives
only in the memory of the starter and the supervisor: it never appears in an argv, an environment, a file's
contents or the task's output, so a task cannot forge its own completion, and printing any marker format
changes nothing. Readers find the exit file by hashing the suffix of each ``exit.*`` name (sha256) and
comparing with the hash the gateway keeps.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping, Sequence

__all__ = [
    "CANCEL_SCRIPT",
    "PURGE_SCRIPT",
    "READ_SCRIPT",
    "WAIT_SCRIPT",
    "command_file",
    "start_script",
]

MARK_VAR = "ROG_TASK_MARK"

_SUPERVISOR = r"""read -r nonce < nonce.fifo
read -r s < /proc/$$/stat
s=${s##*) }
set -- $s
printf '%s %s\n' "$$" "${20}" > sup
printf 'ok\n' > ack.fifo
mkfifo -m 600 o.fifo e.fifo
tee -a stdout < o.fifo >> combined 2>/dev/null &
t1=$!
tee -a stderr < e.fifo >> combined 2>/dev/null &
t2=$!
setsid sh ./cmd > o.fifo 2> e.fifo < /dev/null
rc=$?
# let the tees copy the last bytes (they end at EOF, within ms); a descendant that keeps the output open
# must not hold up completion: after ~2 s they are left running (they end when it does). Only our own
# unreaped children are looked at, so no recycled pid can be mistaken for them. The first checks spin on
# builtins (no process started): the tees usually end within a millisecond of the command.
n=0
while :; do
  busy=0
  for t in $t1 $t2; do
    read -r s 2>/dev/null < "/proc/$t/stat" || continue
    s=${s##*) }
    set -- $s
    [ "$1" = Z ] || busy=1
  done
  if [ "$busy" = 0 ]; then wait $t1; wait $t2; break; fi
  n=$((n + 1))
  [ "$n" -ge 400 ] && break
  [ "$n" -gt 200 ] && sleep 0.01
done
printf '%s\n' "$rc" > "exit.$nonce"
for w in .w.*; do
  if [ -p "$w" ]; then printf 'x\n' 4<>"$w" >&4; rm -f "$w"; fi
done 2>/dev/null
rm -f o.fifo e.fifo
"""

_START = r"""set -u
umask 077
fail() { printf 'ROGERR %s %s\n' "$1" "$2"; exit 3; }
case $rel in /*) root=$rel ;; *) root=$HOME/$rel ;; esac
mkdir -p -- "$root" 2>/dev/null || fail root "cannot create $root"
chmod 700 -- "$root" 2>/dev/null
for tool in setsid sha256sum tee mkfifo base64; do
  command -v "$tool" >/dev/null 2>&1 || fail missing "$tool"
done
mode=setsid
if [ "$want" != setsid ] && command -v tmux >/dev/null 2>&1; then mode=tmux; fi
if [ "$want" = tmux ] && [ "$mode" != tmux ]; then fail missing tmux; fi
d=$root/$id
mkdir -- "$d" 2>/dev/null || fail exists "$d"
cd -- "$d" || fail root "cannot enter $d"
: > combined; : > stdout; : > stderr
printf '%s\n' "$cmd_text" > cmd
printf '%s\n' "$sup_text" > supervise.sh
printf '%s\n' "$mode" > mode
mkfifo -m 600 nonce.fifo ack.fifo || fail root "mkfifo failed in $d"
# both FIFOs held open read-write: writing never blocks, and nothing written is lost before it is read
exec 3<>nonce.fifo 4<>ack.fifo
printf '%s\n' "$nonce" >&3
nonce=
sess=-
if [ "$mode" = tmux ]; then
  # A tmux server whose last session just ended is still closing: a client that reaches it in that moment
  # reads "server exited unexpectedly". Retried (bounded); a session that did get created is taken as it is.
  tries=0
  while :; do
    sess=$(tmux -f /dev/null -S "$root/tmux.sock" new-session -d -P -F '#{session_id} #{session_created}' \
      -s "$id" -x 200 -y 50 -c "$d" 'exec sh ./supervise.sh' </dev/null 2>tmux.err) && break
    tries=$((tries + 1))
    if grep -q 'server exited unexpectedly' tmux.err 2>/dev/null; then
      if tmux -S "$root/tmux.sock" has-session -t "=$id" </dev/null >/dev/null 2>&1; then
        sess=$(tmux -S "$root/tmux.sock" display-message -p -t "=$id" '#{session_id} #{session_created}' \
          </dev/null 2>/dev/null) && break
      elif [ "$tries" -lt 5 ]; then
        sleep 0.1
        continue
      fi
    fi
    exec 3>&- 4>&-; rm -f nonce.fifo ack.fifo; fail session "tmux: $(head -c 300 tmux.err)"
  done
else
  setsid -f sh ./supervise.sh </dev/null >/dev/null 2>&1 \
    || { exec 3>&- 4>&-; rm -f nonce.fifo ack.fifo; fail session "setsid failed"; }
fi
# the supervisor says "ok" once it has the nonce and wrote its identity (bounded)
if command -v timeout >/dev/null 2>&1; then
  timeout 10 sh -c 'read -r a <&4' </dev/null \
    || { exec 3>&- 4>&-; rm -f cmd nonce.fifo ack.fifo; fail session "the supervisor did not start"; }
else
  i=0
  while [ ! -s sup ]; do
    i=$((i + 1))
    if [ "$i" -gt 400 ]; then exec 3>&- 4>&-; rm -f cmd; fail session "the supervisor did not start"; fi
    sleep 0.025
  done
fi
exec 3>&- 4>&-
rm -f nonce.fifo ack.fifo
read -r sup < sup
printf '%s\n' "${sess:--}" > session
printf 'ROGOK %s %s\n' "$mode" "$sup"
printf 'ROGSESS %s\n' "${sess:--}"
printf 'ROGDIR %s\n' "$d"
"""

# Shared by the wait and read programs: $d, $H, $spid, $sst must be set.
_CHECKS = r"""seen=
rc=
exit_found() {
  for f in "$d"/exit.*; do
    [ -f "$f" ] || continue
    n=${f##*/exit.}
    case " $seen " in *" $n "*) continue ;; esac
    h=$(printf '%s' "$n" | sha256sum)
    h=${h%% *}
    if [ "$h" = "$H" ]; then
      rc=
      read -r rc < "$f" || :
      case $rc in '' | *[!0-9]*) return 1 ;; esac
      return 0
    fi
    seen="$seen $n"
  done
  return 1
}
if [ "$spid" = - ] && [ -s "$d/sup" ]; then read -r spid sst < "$d/sup"; fi
sup_alive() {
  [ "$spid" != - ] || return 1
  read -r s 2>/dev/null < "/proc/$spid/stat" || return 1
  s=${s##*) }
  set -- $s
  [ "$1" != Z ] && [ "${20}" = "$sst" ]
}
sizes() {
  # one process for the three sizes where stat -c exists (GNU, busybox); else (or a file missing) one each
  set -- $(stat -L -c %s "$d/combined" "$d/stdout" "$d/stderr" 2>/dev/null)
  if [ $# -eq 3 ]; then zc=$1 zo=$2 ze=$3; return; fi
  zc=$(wc -c 2>/dev/null < "$d/combined") || zc=0
  zo=$(wc -c 2>/dev/null < "$d/stdout") || zo=0
  ze=$(wc -c 2>/dev/null < "$d/stderr") || ze=0
}
state() {
  if exit_found; then st=exited
  elif sup_alive; then st=running
  elif exit_found; then st=exited
  else st=lost
  fi
}
"""

WAIT_SCRIPT = (
    r"""d=$1 H=$2 spid=$3 sst=$4 bound=$5 grow=$6 since=$7 re=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGWAIT gone\n'; exit 0; fi
"""
    + _CHECKS
    + r"""now() { read -r u _ < /proc/uptime; u=${u%.*}${u#*.}; }
now
end=$((u + bound)) grow_at=$((u + grow))
sizes
first=$zc
if [ "$since" = - ]; then since=$zc; fi
checked=$since
i=0
out() {
  sizes
  printf 'ROGWAIT %s %s %s %s %s %s %s %s\n' "$1" "${rc:--}" "$zc" "$zo" "$ze" "$since" "$spid" "${sst:--}"
  if [ -n "${m:-}" ]; then printf 'ROGMATCH '; printf '%s' "$m" | head -c 2048 | base64 | tr -d '\n'; echo; fi
  exit 0
}
# a task that has already ended is answered before any wake-up FIFO is made
if exit_found; then out exited; fi
# wake-up FIFO: the supervisor writes a line into every .w.* FIFO right after the exit file (and then
# removes them), so the loop below sleeps in a blocking read (bounded by `timeout`) instead of a short poll;
# a line from anyone else only causes an early re-check. A FIFO gone before it is opened (the supervisor
# just ended) leaves the loop polling, and its first check finds the exit file.
tm=
wf=$d/.w.$$
if command -v timeout >/dev/null 2>&1 && mkfifo -m 600 "$wf" 2>/dev/null; then
  trap '[ ! -p "$wf" ] || rm -f "$wf"' EXIT
  if command exec 3<>"$wf" 2>/dev/null; then tm=1; fi
fi
pause() {
  if [ -n "$tm" ]; then timeout 0.25 sh -c 'read -r x <&3' 2>/dev/null; else sleep 0.05; fi
}
while :; do
  if exit_found; then out exited; fi
  if ! sup_alive; then
    if exit_found; then out exited; fi
    out lost
  fi
  if [ -n "$re" ] || [ -n "$tm" ] || [ $((i % 5)) -eq 0 ]; then
    zc=$(wc -c 2>/dev/null < "$d/combined") || zc=0
  fi
  if [ -n "$re" ] && [ "$zc" -gt "$checked" ]; then
    if m=$(tail -c +$((since + 1)) "$d/combined" | grep -a -E -m 1 -- "$re"); then out matched; fi
    m=
    checked=$zc
  fi
  now
  if [ "$u" -ge "$end" ]; then out still_running; fi
  if [ "$zc" != "$first" ] && [ "$u" -ge "$grow_at" ]; then out still_running; fi
  i=$((i + 1))
  pause
done
"""
)

READ_SCRIPT = (
    r"""d=$1 H=$2 spid=$3 sst=$4 stream=$5 since=$6 max=$7 tail=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGREAD gone\n'; exit 0; fi
"""
    + _CHECKS
    + r"""state
f=$d/$stream
sz=$(wc -c 2>/dev/null < "$f") || { printf 'ROGREAD gone\n'; exit 0; }
if [ "$tail" = 1 ]; then
  start=$((sz > max ? sz - max : 0))
  n=$((sz - start))
else
  start=$since
  if [ "$start" -gt "$sz" ]; then printf 'ROGREAD cursor %s\n' "$sz"; exit 0; fi
  n=$max
fi
printf 'ROGREAD ok %s %s %s %s\n' "$st" "${rc:--}" "$sz" "$start"
tail -c +$((start + 1)) "$f" | head -c "$n" | base64
"""
)

CANCEL_SCRIPT = (
    r"""d=$1 mark=$2 t_int=$3 t_term=$4 t_kill=$5 H=$6 spid=$7 sst=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGCANCEL gone\n'; exit 0; fi
pg=
[ -s "$d/pgid" ] && read -r pg < "$d/pgid"
"""
    + _CHECKS
    + r"""
read -r mode 2>/dev/null < "$d/mode" || mode=setsid
supalive=0
read -r s 2>/dev/null < "/proc/$spid/stat" && {
  s=${s##*) }
  set -- $s
  [ "$1" != Z ] && [ "${20}" = "$sst" ] && supalive=1
}
members() {
  list=
  for p in /proc/[0-9]*; do
    read -r s 2>/dev/null < "$p/stat" || continue
    s=${s##*) }
    set -- $s
    [ "$1" = Z ] && continue
    # the group only while its supervisor lives: a group number of a finished task may be reused
    if [ "$supalive" = 1 ] && [ -n "$pg" ] && [ "$3" = "$pg" ]; then list="$list ${p#/proc/}"; fi
  done
  for ent in $(grep -lzxF -- "ROG_TASK_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null); do
    p=${ent#/proc/}
    p=${p%/environ}
    case " $list " in *" $p "*) ;; *) list="$list $p" ;; esac
  done
}
now() { read -r u _ < /proc/uptime; u=${u%.*}${u#*.}; }
nap() { if [ "$1" -lt 10 ]; then sleep 0.01; else sleep 0.05; fi; }  # quick at first, then gentler
gone_within() {
  now
  dl=$((u + $1))
  j=0
  while :; do
    members
    [ -z "$list" ] && return 0
    now
    [ "$u" -ge "$dl" ] && return 1
    nap "$j"
    j=$((j + 1))
  done
}
step=none
members
if [ -n "$list" ]; then
  step=not_confirmed
  for sig in INT TERM KILL; do
    case $sig in INT) t=$t_int ;; TERM) t=$t_term ;; *) t=$t_kill ;; esac
    if [ "$supalive" = 1 ] && [ -n "$pg" ]; then kill -"$sig" -"$pg" 2>/dev/null; fi
    for p in $list; do kill -"$sig" "$p" 2>/dev/null; done
    if gone_within "$t"; then step=$sig; break; fi
  done
fi
removed=no
if [ "$step" != not_confirmed ]; then
  now
  dl=$((u + 500))
  j=0
  while sup_alive; do
    now
    [ "$u" -ge "$dl" ] && break
    nap "$j"
    j=$((j + 1))
  done
  if [ "$mode" = tmux ]; then
    root=${d%/*}
    id=${d##*/}
    tmux -S "$root/tmux.sock" kill-session -t "=$id" </dev/null >/dev/null 2>&1
  elif sup_alive; then
    kill -KILL "$spid" 2>/dev/null
  fi
  if sup_alive; then removed=no; else removed=yes; fi
fi
state
sizes
printf 'ROGCANCEL %s %s %s %s %s\n' "$step" "$removed" "$st" "${rc:--}" "$zc"
"""
)

PURGE_SCRIPT = r"""root=$1
shift
case $root in /*) ;; *) root=$HOME/$root ;; esac
for id in "$@"; do
  case $id in */* | .* | *..*) continue ;; t-*) ;; *) continue ;; esac
  if [ -d "$root/$id" ]; then rm -rf -- "${root:?}/$id" && printf 'ROGPURGED %s\n' "$id"; else
    printf 'ROGPURGED %s\n' "$id"; fi
done
"""


def command_file(argv: Sequence[str], *, marker: str, cwd: str | None, env: Mapping[str, str]) -> str:
    """The task's ``cmd``: record the process group, export the marker, cd, env, then exec argv.

    When SIGINT arrives ignored (inherited from a background launch), ``env --default-signal`` restores it
    where coreutils has it, so that cancellation's first step reaches the program.
    """
    lines = [
        "printf '%s\\n' \"$$\" > .pgid.tmp && mv -f .pgid.tmp pgid",
        f"export {MARK_VAR}={shlex.quote(marker)}",
    ]
    if cwd is not None:
        lines.append(f"cd -- {shlex.quote(cwd)} || exit 1")
    lines.extend(f"export {shlex.quote(f'{name}={value}')}" for name, value in env.items())
    words = shlex.join(argv)
    reset = "=" not in argv[0]
    if reset:
        lines += [
            "ign=0",
            'while read -r k v; do [ "$k" = SigIgn: ] && ign=$v; done < /proc/$$/status',
            "case $ign in *[2367abef]) env --default-signal=INT,QUIT true 2>/dev/null && "
            f"exec env --default-signal=INT,QUIT {words} ;; esac",
        ]
    lines.append(f"exec {words}")
    return "\n".join(lines)


def start_script(*, task_id: str, nonce: str, root: str, want: str, cmd_text: str) -> str:
    """The starter, with its values bound as shell-quoted assignments (the script itself goes on stdin)."""
    assignments = {
        "id": task_id,
        "nonce": nonce,
        "rel": root,
        "want": want,
        "cmd_text": cmd_text,
        "sup_text": _SUPERVISOR,
    }
    head = "\n".join(f"{name}={shlex.quote(value)}" for name, value in assignments.items())
    return head + "\n" + _START


def new_nonce() -> str:
    return secrets.token_hex(16)
