# shellcheck disable=SC2154,SC2034  # a fragment: d, H, spid, sst come from the program that includes it, which uses st, rc, zc, zo, ze, zd, cap, xo, xe
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
  # zc, zo, ze: the bytes of combined, stdout, stderr; zd: what the output takes on the target. combined is
  # measured first, index after it (the supervisor writes a run's line before its bytes). A task started
  # before output was stored once (no index) has a file per stream beside combined.
  zc=$(wc -c 2>/dev/null < "$d/combined") || zc=0
  zc=$((zc + 0))
  if [ -f "$d/index" ]; then
    # shellcheck disable=SC2046  # split into fields on purpose (three numbers)
    set -- $(runs sizes o 0 0 0)
    zo=${1:-0} ze=${2:-0} zd=$((zc + ${3:-0}))
    return
  fi
  # one process for the three sizes where stat -c exists (GNU, busybox); else (or a file missing) one each
  # shellcheck disable=SC2046  # split into fields on purpose (stat prints one size per file)
  set -- $(stat -L -c %s "$d/combined" "$d/stdout" "$d/stderr" 2>/dev/null)
  if [ $# -eq 3 ]; then zc=$1 zo=$2 ze=$3; else
    zo=$(wc -c 2>/dev/null < "$d/stdout") || zo=0
    ze=$(wc -c 2>/dev/null < "$d/stderr") || ze=0
  fi
  zd=$((zc + zo + ze))
}
runs() {
  # index read against combined's size $zc. "sizes": the bytes of stdout, of stderr, and of index itself.
  # "plan": for the stream lettered $2, from its byte $3 (with $5 = 1: its last $4 bytes) at most $4 bytes
  # in at most 256 runs (fewer bytes where more runs would be needed): "ok <size> <start>", then one
  # "<offset in combined> <count>" per run; "cursor <size>" when $3 is beyond its end.
  awk -v zc="$zc" -v mode="$1" -v s="$2" -v from="$3" -v want="$4" -v tail="$5" -v k=256 '
    function run(x, c, len) {
      if (len <= 0) return
      n[x] += len
      if (x == s) { rc[m + 0] = c; rl[m + 0] = len; so[m + 0] = n[x] - len; m++ }
    }
    { zi += length($0) + 1 }
    $2 + 0 < zc + 0 { if (cur != "") run(cur, st, $2 - st); cur = $1; st = $2 + 0 }
    END {
      if (cur != "") run(cur, st, zc - st)
      if (mode == "sizes") { printf "%.0f %.0f %.0f\n", n["o"], n["e"], zi; exit }
      size = n[s] + 0
      if (tail == 1) from = size > want ? size - want : 0
      if (from > size) { printf "cursor %.0f\n", size; exit }
      end = from + want
      if (end > size) end = size
      first = -1
      for (i = 0; i < m; i++) if (so[i] + rl[i] > from && so[i] < end) { if (first < 0) first = i; last = i }
      if (first >= 0 && last - first >= k) {
        if (tail == 1) { first = last - k + 1; from = so[first] } else { last = first + k - 1; end = so[last] + rl[last] }
      }
      printf "ok %.0f %.0f\n", size, from
      if (first >= 0) for (i = first; i <= last; i++) {
        a = so[i] > from ? so[i] : from
        b = so[i] + rl[i] < end ? so[i] + rl[i] : end
        if (b > a) printf "%.0f %.0f\n", rc[i] + a - so[i], b - a
      }
    }' "$d/index"
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
