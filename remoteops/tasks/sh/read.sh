d=$1 H=$2 spid=$3 sst=$4 stream=$5 since=$6 max=$7 tail=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGREAD gone\n'; exit 0; fi
# shellcheck source=SCRIPTDIR/checks.sh
. ./checks.sh
state
if [ "$stream" = combined ] || [ ! -f "$d/index" ]; then  # a file of its own (combined, or an older task's)
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
  sizes
  spill
  printf 'ROGREAD ok %s %s %s %s %s %s %s %s %s %s %s\n' "$st" "${rc:--}" "$sz" "$start" "$zc" "$zo" "$ze" "$cap" \
    "$xo" "$xe" "$zd"
  tail -c +$((start + 1)) "$f" | head -c "$n" | base64
  exit 0
fi
# stdout or stderr: its runs of combined, from the index (measured against the same size of combined)
sizes
spill
case $stream in stdout) l=o ;; *) l=e ;; esac
plan=$(runs plan "$l" "$since" "$max" "$tail")
printf '%s\n' "$plan" | {
  read -r tag sz start
  if [ "$tag" = cursor ]; then printf 'ROGREAD cursor %s\n' "$sz"; exit 0; fi
  [ "$tag" = ok ] || { echo "no plan from awk for $stream" >&2; exit 4; }
  printf 'ROGREAD ok %s %s %s %s %s %s %s %s %s %s %s\n' "$st" "${rc:--}" "$sz" "$start" "$zc" "$zo" "$ze" "$cap" \
    "$xo" "$xe" "$zd"
  while read -r off cnt; do
    [ -n "$cnt" ] || continue
    tail -c +$((off + 1)) "$d/combined" | head -c "$cnt"
  done | base64
}
