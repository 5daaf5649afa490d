# process_list. Arguments: SORT (cpu|memory|start|pid) LIMIT ARGV_CAP NAMES USERS PIDS; each list is one
# word of newline-separated items, "-" for no filter. Output:
#   H <clk_tck> <page size> <btime> <uptime>
#   P <pid> <ppid> <uid> <state> <utime+stime> <starttime> <rss pages> <comm>   (the first LIMIT, sorted)
#   A <argv: the first ARGV_CAP+1 bytes of /proc/PID/cmdline, base64>             (after each P line)
#   U <uid> <user name>                                             (once per uid shown, after the records)
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
set +f
# One awk reads every process's stat and status (getline: a process that ended meanwhile is skipped, never
# an error), filters, and prints each match with its sort key. The filters travel in the environment.
printf '%s\n' /proc/[0-9]* | ROG_PIDS=$pids ROG_NAMES=$names ROG_UIDS=$uids awk -v by="$sort_by" -v hz="$hz" -v up="$up" '
  function set(list, into, n, i, a) {
    if (list == "-") return 0
    n = split(list, a, "\n")
    for (i = 1; i <= n; i++) if (a[i] != "") into[a[i]] = 1
    return 1
  }
  BEGIN {
    bypid = set(ENVIRON["ROG_PIDS"], pid_ok); byname = set(ENVIRON["ROG_NAMES"], name_ok)
    byuid = set(ENVIRON["ROG_UIDS"], uid_ok)
  }
  {
    p = substr($0, 7)
    if (bypid && !(p in pid_ok)) next
    f = $0 "/stat"; s = ""; got = (getline s < f); close(f)
    if (got <= 0) next
    o = index(s, "("); e = 0
    for (i = length(s); i > o; i--) if (substr(s, i, 1) == ")") { e = i; break }
    if (!o || !e) next
    comm = substr(s, o + 1, e - o - 1)
    if (byname && !(comm in name_ok)) next
    f = $0 "/status"; uid = ""
    while ((getline l < f) > 0) if (l ~ /^Uid:/) { split(l, u); uid = u[2]; break }
    close(f)
    if (uid == "" || (byuid && !(uid in uid_ok))) next
    if (split(substr(s, e + 2), w, " ") < 22) next
    t = w[12] + w[13]
    if (by == "cpu") { age = up - w[20] / hz; if (age < 0.01) age = 0.01; key = t / hz / age }
    else if (by == "memory") key = w[22]
    else if (by == "start") key = w[20]
    else key = -p
    printf "%.6f\t%s %s %s %s %s %s %s %s\n", key, p, w[2], uid, w[1], t, w[20], w[22], comm
}' | sort -t "$(printf '\t')" -k1,1nr | LC_ALL=C awk -v n="$limit" -v cap="$cap" '
  # the first LIMIT records, each with its command line (the first CAP+1 bytes, base64); then each uid
  # shown with its user name (getent: NSS, not only /etc/passwd), then how many matched
  BEGIN {
    for (i = 1; i < 256; i++) ord[sprintf("%c", i)] = i
    B = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  }
  function argv(pid, f, k, a, i, m, v, x, out) {
    f = "/proc/" pid "/cmdline"; k = 0; RS = "\0"
    while (k <= cap && (getline a < f) > 0) {
      m = length(a)
      for (i = 1; i <= m && k <= cap; i++) v[++k] = ord[substr(a, i, 1)] + 0
      if (k <= cap) v[++k] = 0
    }
    close(f); RS = "\n"; out = ""
    for (i = 1; i <= k; i += 3) {
      x = v[i] * 65536 + (i + 1 <= k ? v[i + 1] * 256 : 0) + (i + 2 <= k ? v[i + 2] : 0)
      out = out substr(B, int(x / 262144) + 1, 1) substr(B, int(x / 4096) % 64 + 1, 1)
      out = out (i + 1 <= k ? substr(B, int(x / 64) % 64 + 1, 1) : "=") (i + 2 <= k ? substr(B, x % 64 + 1, 1) : "=")
    }
    return out
  }
  NR <= n {
    sub(/^[^\t]*\t/, "")
    print "P " $0
    split($0, w, " ")
    print "A " argv(w[1])
    if (!(w[3] in uid)) { uid[w[3]] = 1; uids[++nu] = w[3] }
  }
  END {
    for (j = 1; j <= nu; j++) {
      cmd = "getent passwd " uids[j]; name = ""
      if ((cmd | getline l) > 0) { split(l, pw, ":"); name = pw[1] }
      close(cmd)
      print "U " uids[j] " " name
    }
    printf "T %d\n", NR
  }'
