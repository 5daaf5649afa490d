# process_list. Arguments: SORT (cpu|memory|start|pid) LIMIT ARGV_CAP NAMES USERS PIDS; each list is one
# word of newline-separated items, "-" for no filter. Output:
#   H <clk_tck> <page size> <btime> <uptime>
#   P <pid> <ppid> <uid> <state> <utime+stime> <starttime> <rss pages> <comm>   (the first LIMIT, sorted)
#   A <argv: the first ARGV_CAP+1 bytes of /proc/PID/cmdline, base64>             (after each P line)
#   U <uid> <user name>                                                         (once per uid shown)
#   T <processes matching the filters>
set -f
sort_by=$1 limit=$2 cap=$3 names=$4 users=$5 pids=$6
hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
pg=$(getconf PAGESIZE 2>/dev/null) || pg=4096
read -r up _ < /proc/uptime
bt=$(awk '$1 == "btime" { print $2 }' /proc/stat)
printf 'H %s %s %s %s\n' "$hz" "$pg" "$bt" "$up"
nl='
'
uids=-
if [ "$users" != - ]; then
  uids=
  IFS=$nl
  for u in $users; do
    case $u in
      *[!0-9]*) n=$(id -u -- "$u" 2>/dev/null) || continue ;;
      *) n=$u ;;
    esac
    uids=$uids$n$nl
  done
  unset IFS
  [ -n "$uids" ] || uids=$nl
fi
listed() { # VALUE LIST: LIST is "-" (everything) or holds VALUE as one of its lines
  [ "$2" = - ] && return 0
  case "$nl$2$nl" in *"$nl$1$nl"*) return 0 ;; esac
  return 1
}
set +f
for d in /proc/[0-9]*; do
  set -f
  p=${d#/proc/}
  listed "$p" "$pids" || continue
  IFS= read -r s 2>/dev/null < "$d/stat" || continue
  c=${s#*\(}
  c=${c%\)*}
  r=${s##*\) }
  [ "$r" = "$s" ] && continue
  listed "$c" "$names" || continue
  uid=
  while IFS= read -r l; do
    # shellcheck disable=SC2086 # the Uid line's words
    case $l in Uid:*) set -- $l; uid=$2; break ;; esac
  done 2>/dev/null < "$d/status"
  [ -n "$uid" ] || continue
  listed "$uid" "$uids" || continue
  # shellcheck disable=SC2086 # the fields after the command name are words
  set -- $r
  printf '%s %s %s %s %s %s %s %s\n' "$p" "$2" "$uid" "$1" "$((${12} + ${13}))" "${20}" "${22}" "$c"
done | awk -v by="$sort_by" -v hz="$hz" -v up="$up" '{
  if (by == "cpu") { age = up - $6 / hz; if (age < 0.01) age = 0.01; key = $5 / hz / age }
  else if (by == "memory") key = $7
  else if (by == "start") key = $6
  else key = -$1
  printf "%.6f\t%s\n", key, $0
}' | sort -t "$(printf '\t')" -k1,1nr | awk -v n="$limit" 'NR <= n { print } END { printf "T\t%d\n", NR }' | {
  seen=' '
  while IFS= read -r line; do
    rest=${line#*"	"}
    case $line in T*) printf 'T %s\n' "$rest"; continue ;; esac
    printf 'P %s\n' "$rest"
    # shellcheck disable=SC2086 # pid and uid are the first and third words
    set -- $rest
    printf 'A '
    head -c "$((cap + 1))" "/proc/$1/cmdline" 2>/dev/null | base64 | tr -d '\n'
    echo
    case $seen in *" $3 "*) ;; *)
      seen="$seen$3 "
      printf 'U %s %s\n' "$3" "$(getent passwd "$3" 2>/dev/null | cut -d: -f1)"
    esac
  done
}
