# disk_usage. Arguments: PATH ("-": filesystems only) TOP_N LIMIT_S MAX_ENTRIES. Output: "D" then df's
# records, then for a PATH "X missing", or "X ok" then "R <find's exit status, -: cut off by the entry bound>",
# "E <entries counted> <1: the entry bound stopped the walk>" and one line: the PATH's total and its TOP_N
# largest children (NUL-terminated "SIZE<tab>NAME", largest first), base64. 124/137: the time limit cut the
# walk short. One filesystem (-xdev): never a mount below PATH; hard links counted once. find's status
# travels in its own stream (a last "R n" record after a NUL: what a kill cut in two is dropped), so nothing
# else writes while the answer is printed.
set -f
path=$1 top=$2 limit=$3 max=$4
echo D
df -P -B1 -T
[ "$path" = - ] && exit 0
if [ ! -e "$path" ]; then echo 'X missing'; exit 0; fi
echo 'X ok'
{ { timeout -k 2 "$limit" find -P "$path" -xdev -printf '%i %n %b %P\0' 2>/dev/null; printf '\0R %s\0' "$?"; } |
  head -z -n "$((max + 3))" | LC_ALL=C awk -v max="$max" -v root="$path" '
    BEGIN { RS = "\0"; ORS = "\0"; sub(/\/+$/, "", root); if (root == "") root = "/" }
    function take(rec, n, ino, links, bytes, rest, rel, child) {
      n = index(rec, " "); ino = substr(rec, 1, n - 1); rest = substr(rec, n + 1)
      n = index(rest, " "); links = substr(rest, 1, n - 1); rest = substr(rest, n + 1)
      n = index(rest, " "); bytes = substr(rest, 1, n - 1) * 512; rel = substr(rest, n + 1)
      if (links > 1) { if (ino in seen) return; seen[ino] = 1 }
      total += bytes
      if (rel == "") return
      n = index(rel, "/"); child = n ? substr(rel, 1, n - 1) : rel
      size[child] += bytes
    }
    $0 == "" { next }
    /^R [0-9]+$/ {
      rc = substr($0, 3)
      if (have && rc != 124 && rc != 137) take(prev)  # after a kill the last record may be cut in two
      have = 0; next
    }
    {
      if (have) take(prev)
      have = 0
      if (++entries > max) { entries = max; cut = 1; exit }
      prev = $0; have = 1
    }
    END {
      printf "R %s\nE %d %d\n", (rc == "" ? "-" : rc), entries, cut > "/dev/stderr"
      print sprintf("%d", total) "\t" root
      for (c in size) print sprintf("%d", size[c]) "\t" root (root == "/" ? "" : "/") c
    }' 2>&3 | sort -z -t "$(printf '\t')" -k1,1nr | head -z -n "$((top + 1))" | base64 | tr -d '\n'; echo; } 3>&1
