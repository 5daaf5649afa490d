# shellcheck source=SCRIPTDIR/prelude.sh
. ./prelude.sh
sid=$2 created=$3 d=$4 view=$5 since=$6 max=$7 lines=$8 keep=$9
st=gone
alive "$sid" "$created" "$d" && st=alive
if [ "$view" = stream ]; then
  [ -f "$d/out" ] || { printf 'ROGREAD nostream\n'; exit 0; }
  size "$d/out"
  if [ "$since" -gt "$z" ]; then printf 'ROGREAD cursor %s\n' "$z"; exit 0; fi
  printf 'ROGREAD ok %s %s %s %s\n' "$st" "$z" "$since" "${pipe:-0}"
  tail -c +$((since + 1)) "$d/out" | head -c "$max" | base64
  exit 0
fi
[ "$st" = alive ] || { printf 'ROGREAD gone\n'; exit 0; }
e=
[ "$keep" = 1 ] && e=-e
geo=$(tmx display-message -p -t "$sid" '#{cursor_x} #{cursor_y} #{pane_width} #{pane_height}' </dev/null) \
  || fail tmux "$(head -c 300 "$errf")"
if [ "$view" = screen ]; then
  cap=$(tmx capture-pane -p $e -t "$sid" </dev/null | tail -c "$((max + 1))" | base64) \
    || fail tmux "$(head -c 300 "$errf")"
else
  cap=$(tmx capture-pane -p $e -S "-$lines" -t "$sid" </dev/null | tail -c "$((max + 1))" | base64) \
    || fail tmux "$(head -c 300 "$errf")"
fi
printf 'ROGREAD pane %s %s\n' "$st" "$geo"
printf '%s\n' "$cap"
