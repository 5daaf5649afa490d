# shellcheck disable=SC2154  # id, nonce, rel, want, cap, cmd_text, sup_text are assigned by the lines start_script puts before it
set -u
umask 077
fail() { printf 'ROGERR %s %s\n' "$1" "$2"; exit 3; }
case $rel in /*) root=$rel ;; *) root=$HOME/$rel ;; esac
mkdir -p -- "$root" 2>/dev/null || fail root "cannot create $root"
chmod 700 -- "$root" 2>/dev/null
for tool in setsid sha256sum flock awk mkfifo base64; do
  command -v "$tool" >/dev/null 2>&1 || fail missing "$tool"
done
mode=setsid
if [ "$want" != setsid ] && command -v tmux >/dev/null 2>&1; then mode=tmux; fi
if [ "$want" = tmux ] && [ "$mode" != tmux ]; then fail missing tmux; fi
d=$root/$id
mkdir -- "$d" 2>/dev/null || fail exists "$d"
cd -- "$d" || fail root "cannot enter $d"
: > combined; : > index
printf '%s\n' "$cmd_text" > cmd
printf '%s\n' "$sup_text" > supervise.sh
printf '%s\n' "$mode" > mode
printf '%s\n' "$cap" > cap
mkfifo -m 600 nonce.fifo ack.fifo || fail root "mkfifo failed in $d"
# both FIFOs held open read-write: writing never blocks, and nothing written is lost before it is read
exec 3<>nonce.fifo 4<>ack.fifo
printf '%s\n' "$nonce" >&3
nonce=
sess=-
if [ "$mode" = tmux ]; then
  # A tmux server whose last session just ended is still closing: a client that reaches it in that moment
  # reads "server exited unexpectedly". Retried (bounded); a session that did get created is taken as it is.
  tries=0
  while :; do
    sess=$(tmux -f /dev/null -S "$root/tmux.sock" new-session -d -P -F '#{session_id} #{session_created}' \
      -s "$id" -x 200 -y 50 -c "$d" 'exec sh ./supervise.sh' </dev/null 2>tmux.err) && break
    tries=$((tries + 1))
    if grep -q 'server exited unexpectedly' tmux.err 2>/dev/null; then
      if tmux -S "$root/tmux.sock" has-session -t "=$id" </dev/null >/dev/null 2>&1; then
        sess=$(tmux -S "$root/tmux.sock" display-message -p -t "=$id" '#{session_id} #{session_created}' \
          </dev/null 2>/dev/null) && break
      elif [ "$tries" -lt 5 ]; then
        sleep 0.1
        continue
      fi
    fi
    exec 3>&- 4>&-; rm -f nonce.fifo ack.fifo; fail session "tmux: $(head -c 300 tmux.err)"
  done
else
  setsid -f sh ./supervise.sh </dev/null >/dev/null 2>&1 \
    || { exec 3>&- 4>&-; rm -f nonce.fifo ack.fifo; fail session "setsid failed"; }
fi
# the supervisor says "ok" once it has the nonce and wrote its identity (bounded)
if command -v timeout >/dev/null 2>&1; then
  timeout 10 sh -c 'read -r a <&4' </dev/null \
    || { exec 3>&- 4>&-; rm -f cmd nonce.fifo ack.fifo; fail session "the supervisor did not start"; }
else
  i=0
  while [ ! -s sup ]; do
    i=$((i + 1))
    if [ "$i" -gt 400 ]; then exec 3>&- 4>&-; rm -f cmd; fail session "the supervisor did not start"; fi
    sleep 0.025
  done
fi
exec 3>&- 4>&-
rm -f nonce.fifo ack.fifo
# shellcheck disable=SC2094  # the file sup is only read; the variable sup merely has the same name
read -r sup < sup
printf '%s\n' "${sess:--}" > session
printf 'ROGOK %s %s\n' "$mode" "$sup"
printf 'ROGSESS %s\n' "${sess:--}"
printf 'ROGDIR %s\n' "$d"
