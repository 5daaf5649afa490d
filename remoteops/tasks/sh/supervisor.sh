read -r nonce < nonce.fifo
read -r s < /proc/$$/stat
s=${s##*) }
# shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
set -- $s
printf '%s %s\n' "$$" "${20}" > sup
printf 'ok\n' > ack.fifo
mkfifo -m 600 o.fifo e.fifo
# The output is stored once, in combined (both streams in the order their reads were appended); index says
# which stream each run of combined belongs to: a line "<o|e> <offset in combined>" begins a run, which lasts
# until the next line's offset (the last one: to the end of combined). A run's line is written before its
# bytes, under a lock both writers take (flock), so a reader that measures combined first and reads index
# after it finds a run for every byte it measured. Each stream keeps its first $cap bytes; what follows is
# read on, counted into <stream>.dropped (per MiB read, and at its end) and discarded: the task is neither
# blocked nor killed.
read -r cap < ./cap || cap=67108864
fb=
if dd if=/dev/null of=/dev/null count=0 iflag=fullblock 2>/dev/null; then fb=iflag=fullblock; fi
drain() {
  t=0
  # shellcheck disable=SC2086  # $fb is empty or one word on purpose
  while n=$(dd bs=1048576 count=1 $fb 2>/dev/null | wc -c) && [ "$n" -gt 0 ]; do
    t=$((t + n))
    printf '%s\n' "$t" > ".$1.dropped" && mv -f ".$1.dropped" "$1.dropped"
  done
}
keep() {
  # $1: the stream (stdout | stderr), $2: its letter in index. One read of the stream at a time (copied at
  # once: head -c, or dd count_bytes with partial reads, would hold output back or miscount), never more
  # than is left of the cap, into a part file outside the lock (a read that waits for output must not
  # hold up the other stream), then appended under the lock; a new run only where the other stream (or
  # nothing yet) wrote last.
  left=$cap at=-
  while [ "$left" -gt 0 ]; do
    b=65536
    [ "$left" -lt "$b" ] && b=$left
    dd bs="$b" count=1 2> ".$2.dd" > ".$2.part" || :
    # the count from dd's own report ("N bytes ... copied", its third line; GNU and busybox), else wc
    n=
    { read -r _ && read -r _ && read -r n _; } < ".$2.dd" 2>/dev/null
    case $n in '' | *[!0-9]*) n=$(wc -c < ".$2.part") || n=0 ;; esac
    [ "$n" -gt 0 ] || { rm -f ".$2.part" ".$2.dd"; return 0; }
    {
      flock 9
      # .size: combined's size, kept under the lock by the two keepers (no process to measure it)
      read -r c 2>/dev/null < .size || c=0
      [ "$c" = "$at" ] || printf '%s %s\n' "$2" "$c" >> index
      cat ".$2.part" >> combined
      at=$((c + n))
      printf '%s\n' "$at" > .size
    } 9>> .lock
    left=$((left - n))
  done
  rm -f ".$2.part" ".$2.dd"
  drain "$1"
}
printf '0\n' > .size
keep stdout o < o.fifo 2>/dev/null &
t1=$!
keep stderr e < e.fifo 2>/dev/null &
t2=$!
setsid sh ./cmd > o.fifo 2> e.fifo < /dev/null
rc=$?
# let the keepers copy the last bytes (they end at EOF, within ms); a descendant that keeps the output open
# must not hold up completion: after ~2 s they are left running (they end when it does). Only our own
# unreaped children are looked at, so no recycled pid can be mistaken for them. The first checks spin on
# builtins (no process started): the keepers usually end within a millisecond of the command.
n=0
while :; do
  busy=0
  for t in $t1 $t2; do
    read -r s 2>/dev/null < "/proc/$t/stat" || continue
    s=${s##*) }
    # shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
    set -- $s
    [ "$1" = Z ] || busy=1
  done
  if [ "$busy" = 0 ]; then wait $t1; wait $t2; break; fi
  n=$((n + 1))
  [ "$n" -ge 400 ] && break
  [ "$n" -gt 200 ] && sleep 0.01
done
printf '%s\n' "$rc" > "exit.$nonce"
for w in .w.*; do
  if [ -p "$w" ]; then printf 'x\n' 4<>"$w" >&4; rm -f "$w"; fi
done 2>/dev/null
rm -f o.fifo e.fifo
