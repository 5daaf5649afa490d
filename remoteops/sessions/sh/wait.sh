# shellcheck source=SCRIPTDIR/prelude.sh
. ./prelude.sh
sid=$2 created=$3 d=$4 bound=$5 since=$6 re=$7
now() { read -r u _ < /proc/uptime; u=${u%.*}${u#*.}; }
now
end=$((u + bound))
E=$(printf '\033')
B=$(printf '\007')
# escape sequences removed the way the gateway removes them from reads (CSI, OSC, charset, 2-char)
strip() {
  # shellcheck disable=SC1087  # POSIX sh has no arrays: $E[ is $E followed by a bracket expression
  LC_ALL=C sed -e "s/$E\[[0-?]*[ -/]*[@-~]//g" -e "s/$E][^$B$E]*$B//g" -e "s/$E][^$E]*$E\\\\//g" \
    -e "s/$E[()*+][0-9A-Za-z]//g" -e "s/$E[=>78]//g" -e "s/$E[@-_]//g" | LC_ALL=C tr -d '\r\007'
}
size "$d/out"
[ "$since" = - ] && since=$z
checked=$since
out() {
  size "$d/out"
  printf 'ROGWAIT %s %s %s\n' "$1" "${cur:-$checked}" "$z"
  if [ "$1" = matched ]; then
    printf 'ROGMATCH '; printf '%s' "$m" | head -c 2048 | base64 | tr -d '\n'; echo
    printf 'ROGLINE '; printf '%s' "$line" | head -c 4096 | base64 | tr -d '\n'; echo
  fi
  exit 0
}
# search [checked, z): the first matching line (the unfinished last one included); otherwise move
# `checked` to the start of the unfinished last line, so later passes read only what is new
search() {
  size "$d/out"
  [ "$z" -gt "$checked" ] || return 1
  n=$((z - checked))
  hit=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | strip | LC_ALL=C grep -n -a -E -m 1 -- "$re") \
    && {
      ln=${hit%%:*}
      line=${hit#*:}
      used=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | head -n "$ln" | wc -c)
      cur=$((checked + ${used##* }))
      m=$(printf '%s\n' "$line" | LC_ALL=C grep -a -E -o -m 1 -- "$re" | head -n 1)
      return 0
    }
  nl=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | wc -l)
  nl=${nl##* }
  if [ "$nl" -gt 0 ]; then
    adv=$(tail -c +$((checked + 1)) "$d/out" | head -c "$n" | head -n "$nl" | wc -c)
    checked=$((checked + ${adv##* }))
  fi
  return 1
}
while :; do
  if alive "$sid" "$created" "$d"; then up=1; else up=0; fi
  search && out matched
  [ "$up" = 1 ] || out session_exited
  now
  [ "$u" -ge "$end" ] && out timeout
  sleep 0.2
done
