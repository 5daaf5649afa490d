d=$1 H=$2 spid=$3 sst=$4 stream=$5 since=$6 max=$7 tail=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGREAD gone\n'; exit 0; fi
# shellcheck source=SCRIPTDIR/checks.sh
. ./checks.sh
state
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
printf 'ROGREAD ok %s %s %s %s %s %s %s %s %s %s\n' "$st" "${rc:--}" "$sz" "$start" "$zc" "$zo" "$ze" "$cap" "$xo" "$xe"
tail -c +$((start + 1)) "$f" | head -c "$n" | base64
