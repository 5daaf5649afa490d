# shellcheck disable=SC2154  # b64 is assigned by the line send_script puts before it
# shellcheck source=SCRIPTDIR/prelude.sh
. ./prelude.sh
sid=$2 created=$3 d=$4 mode=$5
shift 5
alive "$sid" "$created" "$d" || { printf 'ROGSEND gone\n'; exit 0; }
size "$d/out"
before=$z
if [ "$mode" != none ]; then
  command -v base64 >/dev/null 2>&1 || fail missing base64
  buf=rog-$$-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  # the session is alive, so the server is not closing: no retry needed (stdin cannot be replayed)
  printf '%s' "$b64" | base64 -d | tmux -f /dev/null -S "$sock" load-buffer -b "$buf" - 2>"$errf" \
    || fail tmux "load-buffer: $(head -c 300 "$errf")"
  if [ "$mode" = paste ]; then flag=-p; else flag=-r; fi
  if ! tmx paste-buffer -d $flag -b "$buf" -t "$sid" </dev/null; then
    tmx delete-buffer -b "$buf" </dev/null >/dev/null 2>&1
    fail tmux "paste-buffer: $(head -c 300 "$errf")"
  fi
fi
if [ "$#" -gt 0 ]; then
  tmx send-keys -t "$sid" "$@" </dev/null || fail tmux "send-keys: $(head -c 300 "$errf")"
fi
printf 'ROGSEND ok %s\n' "$before"
