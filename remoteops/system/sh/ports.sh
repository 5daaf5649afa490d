# port_list. Argument: SOURCE (auto|ss|proc). Output: "S ss" then ss's one-line records, or
# "S proc <why: asked | ss-missing | ss-failed>" then
#   L <tcp|tcp6|udp|udp6> <local address:port, hex as in /proc/net> <inode>   (listening sockets)
#   O <pid> <inode> <comm>                                                   (their owners, where visible)
# or "S none" (ss asked for and missing), "S failed <ss's exit status>" (ss asked for, and it failed: too
# old for -H/-O; its message on stderr). auto falls back to /proc for both.
set -f
mode=$1
why=asked
if [ "$mode" != proc ]; then
  if command -v ss >/dev/null 2>&1; then
    if records=$(ss -H -O -tulpn); then
      echo 'S ss'
      [ -z "$records" ] || printf '%s\n' "$records"
      exit 0
    else
      rc=$?
      if [ "$mode" = ss ]; then echo "S failed $rc"; exit 0; fi
      why=ss-failed
    fi
  else
    if [ "$mode" = ss ]; then echo 'S none'; exit 0; fi
    why=ss-missing
  fi
fi
echo "S proc $why"
listening=$(
  for f in tcp tcp6 udp udp6; do
    [ -r "/proc/net/$f" ] || continue
    awk -v f="$f" 'NR > 1 && (($4 == "0A" && f ~ /^tcp/) || ($4 == "07" && f ~ /^udp/)) {
      print "L", f, $2, $10
    }' "/proc/net/$f"
  done
)
[ -n "$listening" ] || exit 0
printf '%s\n' "$listening"
# the owners: every fd that is one of these sockets (only the caller's own processes unless root)
set +f
find /proc/[0-9]*/fd -lname 'socket:*' -printf '%h %l\n' 2>/dev/null | awk -v want="$listening" '
  BEGIN { n = split(want, rows, "\n"); for (i = 1; i <= n; i++) { split(rows[i], w, " "); inode[w[4]] = 1 } }
  { i = $2; gsub(/[^0-9]/, "", i); if (i in inode) { split($1, p, "/"); print p[3], i } }
' | sort -u | while read -r pid ino; do
  IFS= read -r comm 2>/dev/null < "/proc/$pid/comm" || continue
  printf 'O %s %s %s\n' "$pid" "$ino" "$comm"
done
