d=$1 H=$2 spid=$3 sst=$4 bound=$5 grow=$6 since=$7 re=$8
case $d in /*) ;; *) d=$HOME/$d ;; esac
if [ ! -d "$d" ]; then printf 'ROGWAIT gone\n'; exit 0; fi
# shellcheck source=SCRIPTDIR/checks.sh
. ./checks.sh
now() { read -r u _ < /proc/uptime; u=${u%.*}${u#*.}; }
now
end=$((u + bound)) grow_at=$((u + grow))
sizes
first=$zc
if [ "$since" = - ]; then since=$zc; fi
checked=$since
i=0
out() {
  sizes
  spill
  printf 'ROGWAIT %s %s %s %s %s %s %s %s %s %s %s %s\n' "$1" "${rc:--}" "$zc" "$zo" "$ze" "$since" "$spid" \
    "${sst:--}" "$cap" "$xo" "$xe" "$zd"
  if [ -n "${m:-}" ]; then printf 'ROGMATCH '; printf '%s' "$m" | head -c 2048 | base64 | tr -d '\n'; echo; fi
  exit 0
}
# a task that has already ended is answered before any wake-up FIFO is made
if exit_found; then out exited; fi
# wake-up FIFO: the supervisor writes a line into every .w.* FIFO right after the exit file (and then
# removes them), so the loop below sleeps in a blocking read (bounded by `timeout`) instead of a short poll;
# a line from anyone else only causes an early re-check. A FIFO gone before it is opened (the supervisor
# just ended) leaves the loop polling, and its first check finds the exit file.
tm=
wf=$d/.w.$$
if command -v timeout >/dev/null 2>&1 && mkfifo -m 600 "$wf" 2>/dev/null; then
  trap '[ ! -p "$wf" ] || rm -f "$wf"' EXIT
  if command exec 3<>"$wf" 2>/dev/null; then tm=1; fi
fi
pause() {
  if [ -n "$tm" ]; then timeout 0.25 sh -c 'read -r x <&3' 2>/dev/null; else sleep 0.05; fi
}
while :; do
  if exit_found; then out exited; fi
  if ! sup_alive; then
    if exit_found; then out exited; fi
    out lost
  fi
  if [ -n "$re" ] || [ -n "$tm" ] || [ $((i % 5)) -eq 0 ]; then
    zc=$(wc -c 2>/dev/null < "$d/combined") || zc=0
  fi
  if [ -n "$re" ] && [ "$zc" -gt "$checked" ]; then
    if m=$(tail -c +$((since + 1)) "$d/combined" | grep -a -E -m 1 -- "$re"); then out matched; fi
    m=
    checked=$zc
  fi
  now
  if [ "$u" -ge "$end" ]; then out still_running; fi
  if [ "$zc" != "$first" ] && [ "$u" -ge "$grow_at" ]; then out still_running; fi
  i=$((i + 1))
  pause
done
