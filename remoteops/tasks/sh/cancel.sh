d=$1 mark=$2 t_int=$3 t_term=$4 t_kill=$5 H=$6 spid=$7 sst=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGCANCEL gone\n'; exit 0; fi
pg=
[ -s "$d/pgid" ] && read -r pg < "$d/pgid"
# shellcheck source=SCRIPTDIR/checks.sh
. ./checks.sh

read -r mode 2>/dev/null < "$d/mode" || mode=setsid
supalive=0
read -r s 2>/dev/null < "/proc/$spid/stat" && {
  s=${s##*) }
  # shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
  set -- $s
  [ "$1" != Z ] && [ "${20}" = "$sst" ] && supalive=1
}
members() {
  list=
  for p in /proc/[0-9]*; do
    read -r s 2>/dev/null < "$p/stat" || continue
    s=${s##*) }
    # shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
    set -- $s
    [ "$1" = Z ] && continue
    # the group only while its supervisor lives: a group number of a finished task may be reused
    if [ "$supalive" = 1 ] && [ -n "$pg" ] && [ "$3" = "$pg" ]; then list="$list ${p#/proc/}"; fi
  done
  # shellcheck disable=SC2013  # the words are /proc paths (no blanks): grep -l lists one per file
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
spill
printf 'ROGCANCEL %s %s %s %s %s %s %s %s %s %s %s\n' "$step" "$removed" "$st" "${rc:--}" "$zc" "$zo" "$ze" "$cap" "$xo" \
  "$xe" "$zd"
