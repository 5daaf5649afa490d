# shellcheck source=SCRIPTDIR/prelude.sh
. ./prelude.sh
name=$2 w=$3 h=$4 hist=$5 blocks=$6 token=$7 hascwd=$8 cwd=$9
command -v base64 >/dev/null 2>&1 || fail missing base64
mkdir -p -- "$root" 2>/dev/null || fail root "cannot create $root"
chmod 700 -- "$root" 2>/dev/null
# lookup: the live session named $name on our socket, if any (absence must be proven, never assumed)
lookup() {
  found=
  [ -S "$sock" ] || return 0
  if ! sl=$(tmx list-sessions -F '#{session_name} #{session_id} #{session_created} #{@rog_dir}' </dev/null)
  then
    absent && return 0
    fail tmux "$(head -c 300 "$errf")"
  fi
  while read -r n i c dd; do
    if [ "$n" = "$name" ]; then found="$i $c $dd"; return 0; fi
  done <<EOF
$sl
EOF
}
report() {
  fd=${found#* * }
  # shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
  set -- $found
  sz=0
  if [ -n "$fd" ]; then size "$fd/out"; sz=$z; fi
  printf 'ROGFOUND %s %s %s\n' "$1" "$2" "$sz"
  printf 'ROGDIR %s\n' "$fd"
  exit 0
}
lookup
[ -n "$found" ] && report
# proven absent: earlier incarnations of this name are dead; remove their directories
for old in "$root/$name".*; do
  [ -d "$old" ] && rm -rf -- "$old"
done
d=$root/$name.$token
mkdir -- "$d" 2>/dev/null || fail root "cannot create $d"
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
: > "$d/out"
printf 'ulimit -f %s && exec cat >> %s\n' "$blocks" "$(q "$d/out")" > "$d/pipecmd"
if [ "$hascwd" = 1 ]; then printf '%s\n' "$cwd" > "$d/cwd"; fi
cat > "$d/wrap" <<'WRAP'
d=$(pwd)
IFS= read -r pc < pipecmd
tmux -S "${d%/*}/tmux.sock" pipe-pane -t "$TMUX_PANE" "$pc" </dev/null >/dev/null 2>&1 && : > piped
c=$HOME
if [ -s cwd ]; then IFS= read -r c < cwd; fi
cd -- "$c" 2>/dev/null || cd
exec "${SHELL:-/bin/sh}" -l
WRAP
# window-size manual (the fixed size, whoever attaches) is set on the new window only: as a global option
# tmux 3.3a crashes in the next new-session
if ! new=$(tmx start-server \; set-option -g history-limit "$hist" \; set-option -g status off \; \
    new-session -d -P -F '#{session_id} #{session_created}' -s "$name" -x "$w" -y "$h" -c "$d" \
    'exec sh ./wrap' \; set-option -w window-size manual </dev/null); then
  why=$(head -c 300 "$errf")
  lookup  # a racing creator (or a creation whose answer was lost): take the live session as it is
  [ -n "$found" ] && { rm -rf -- "$d"; report; }
  rm -rf -- "$d"
  fail tmux "$why"
fi
# shellcheck disable=SC2086  # split into fields on purpose (a /proc stat line, a list of words)
set -- $new
sid=$1 created=$2
tmx set-option -t "$sid" @rog_dir "$d" </dev/null >/dev/null
# the pane attaches its output pipe before starting the shell (bounded)
i=0
while [ ! -e "$d/piped" ]; do
  i=$((i + 1))
  if [ "$i" -gt 250 ]; then
    tmx kill-session -t "$sid" </dev/null >/dev/null 2>&1
    rm -rf -- "$d"
    fail pipe "the session's output pipe did not start"
  fi
  sleep 0.02
done
size "$d/out"
printf 'ROGNEW %s %s %s\n' "$sid" "$created" "$z"
printf 'ROGDIR %s\n' "$d"
