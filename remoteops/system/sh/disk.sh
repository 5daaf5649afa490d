# disk_usage. Arguments: PATH ("-": filesystems only) TOP_N LIMIT_S. Output: "D" then df's records, then for a
# PATH "X missing", or "X ok" then "R <du's exit status>" and one line: du's top TOP_N+1 records (the PATH
# itself and its largest children, NUL-terminated "SIZE<tab>NAME"), base64. 124: the time limit cut du short.
set -f
path=$1 top=$2 limit=$3
echo D
df -P -B1 -T
[ "$path" = - ] && exit 0
if [ ! -e "$path" ]; then echo 'X missing'; exit 0; fi
echo 'X ok'
{ { timeout -k 2 "$limit" du -x -B1 -d 1 -0 -- "$path" 2>/dev/null; echo "R $?" >&3; } |
  sort -z -rn | head -z -n "$((top + 1))" | base64 | tr -d '\n'; echo; } 3>&1
