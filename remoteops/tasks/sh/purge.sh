root=$1
shift
case $root in /*) ;; *) root=$HOME/$root ;; esac
for id in "$@"; do
  case $id in */* | .* | *..*) continue ;; t-*) ;; *) continue ;; esac
  if [ -d "$root/$id" ]; then rm -rf -- "${root:?}/$id" && printf 'ROGPURGED %s\n' "$id"; else
    printf 'ROGPURGED %s\n' "$id"; fi
done
