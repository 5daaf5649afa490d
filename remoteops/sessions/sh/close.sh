# shellcheck source=SCRIPTDIR/prelude.sh
. ./prelude.sh
sid=$2 created=$3 d=$4
outcome=already_exited
if alive "$sid" "$created" "$d"; then
  tmx kill-session -t "$sid" </dev/null >/dev/null || fail tmux "$(head -c 300 "$errf")"
  outcome=killed
  i=0
  while alive "$sid" "$created" "$d"; do
    i=$((i + 1))
    [ "$i" -gt 250 ] && fail kill "the session is still alive after kill-session"
    sleep 0.02
  done
fi
removed=no
case $d in
  "$root"/?*.?*) rm -rf -- "$d" && removed=yes ;;
esac
printf 'ROGCLOSE %s %s\n' "$outcome" "$removed"
