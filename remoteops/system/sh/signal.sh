# process_signal: check the process's identity and signal it in one step. Arguments: PID SIGNAL START_TIME
# (epoch seconds as process_list gave it, "-": not checked) NAME ("-": not checked). Output:
#   K gone | K mismatch <starttime> <btime> <clk_tck> <comm> | K sent <starttime> <btime> <clk_tck> <comm>
# A refused kill exits with kill's status and message (EPERM: "Operation not permitted", for escalation).
set -f
pid=$1 sig=$2 start=$3 name=$4
IFS= read -r s 2>/dev/null < "/proc/$pid/stat" || { echo 'K gone'; exit 0; }
c=${s#*\(}
c=${c%\)*}
r=${s##*\) }
# shellcheck disable=SC2086 # the fields after the command name are words
set -- $r
st=${20}
hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
bt=$(awk '$1 == "btime" { print $2 }' /proc/stat)
verdict=sent
if [ "$start" != - ]; then
  want=$(awk -v e="$start" -v b="$bt" -v hz="$hz" 'BEGIN { printf "%d", (e - b) * hz + 0.5 }')
  [ "$want" = "$st" ] || verdict=mismatch
fi
if [ "$name" != - ] && [ "$name" != "$c" ]; then verdict=mismatch; fi
if [ "$verdict" = sent ]; then kill -s "$sig" "$pid" || exit; fi
printf 'K %s %s %s %s %s\n' "$verdict" "$st" "$bt" "$hz" "$c"
