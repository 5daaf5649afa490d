# shellcheck disable=SC2154,SC2034  # a fragment: d, H, spid, sst come from the program that includes it, which uses st, rc, zc, zo, ze, cap, xo, xe
seen=
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
  # shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
  set -- $s
  [ "$1" != Z ] && [ "${20}" = "$sst" ]
}
sizes() {
  # one process for the three sizes where stat -c exists (GNU, busybox); else (or a file missing) one each
  # shellcheck disable=SC2046  # split into fields on purpose (stat prints one size per file)
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
spill() {
  # the cap per stream and the bytes each stream dropped after it (0: none, or not yet counted); - : no cap
  cap=- xo=0 xe=0
  read -r cap 2>/dev/null < "$d/cap" || cap=-
  read -r xo 2>/dev/null < "$d/stdout.dropped" || xo=0
  read -r xe 2>/dev/null < "$d/stderr.dropped" || xe=0
  case $cap in '' | *[!0-9]*) cap=- ;; esac
  case $xo in '' | *[!0-9]*) xo=0 ;; esac
  case $xe in '' | *[!0-9]*) xe=0 ;; esac
}
