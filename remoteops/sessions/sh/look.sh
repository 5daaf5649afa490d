# shellcheck source=SCRIPTDIR/prelude.sh
. ./prelude.sh
sid=$2 created=$3 d=$4
size "$d/out"
if alive "$sid" "$created" "$d"; then
  printf 'ROGLOOK alive %s %s\n' "$z" "$pipe"
else
  printf 'ROGLOOK gone %s 0\n' "$z"
fi
